"""The batch capability on the hybrid store, written once as steps like its other operations.

A batch claim reads the whole batch's Redis copies in one pipeline; keys a finished copy
answers go no further, the rest are claimed together on the durable store (its own batch
claim when it has one, else one claim each), and copies Redis lost are put back in one
pipeline. A batch completion completes on the durable store, then copies what finished to
Redis in one pipeline, best effort, as a single completion does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mideng.core.record import REPLAY, Claim, ClaimRequest, Record
from mideng.errors import LeaseLostError, StoreUnavailableError
from mideng.stores.batch import BatchStore, Completed, Completion, distinct
from mideng.stores.hybrid import HybridStore, Steps, from_copy, replayable
from mideng.stores.redis.batch import arun_many, run_many
from mideng.stores.redis.store import RedisStore

_NONE: dict[str, Any] = {}
_CLAIM_MANY = ("claim_many", "aclaim_many")
_COMPLETE_MANY = ("complete_many", "acomplete_many")
_CLAIM, _COMPLETE = ("claim", "aclaim"), ("complete", "acomplete")
_GET_MANY, _PUT_MANY = ("get_many", "aget_many"), ("put_many", "aput_many")


class _Copies:
    """Redis's side of a batch: gets and puts of many copies, each one pipeline."""

    def __init__(self, fast: RedisStore) -> None:
        self.fast = fast

    def get_many(self, keys: Sequence[tuple[str, str]]) -> list[Record | None]:
        c = self.fast.commands
        return run_many(self.fast, [c.get(s, k) for s, k in keys])

    async def aget_many(self, keys: Sequence[tuple[str, str]]) -> list[Record | None]:
        c = self.fast.commands
        return await arun_many(self.fast, [c.get(s, k) for s, k in keys])

    def put_many(self, records: Sequence[Record]) -> None:
        run_many(self.fast, [self.fast.commands.put(r) for r in records])

    async def aput_many(self, records: Sequence[Record]) -> None:
        await arun_many(self.fast, [self.fast.commands.put(r) for r in records])


class HybridBatch(HybridStore, BatchStore):
    """HybridStore with batches; what ``open_store(redis_url, durable=...)`` builds."""

    def __init__(self, fast: RedisStore, durable: Any, **options: Any) -> None:
        super().__init__(fast, durable, **options)
        self.copies = _Copies(fast)

    def _claim_many(self, reqs: Sequence[ClaimRequest]) -> Steps[list[Claim]]:
        distinct(reqs)
        copies: list[Record | None] = [None] * len(reqs)
        answered = False
        if not self.outage.down():
            try:
                keys = [(r.scope, r.key) for r in reqs]
                copies = yield self.copies, _GET_MANY, (keys,), _NONE
                answered = True
            except StoreUnavailableError as exc:
                self.outage.failed(exc)
        answers = [from_copy(c, r) for c, r in zip(copies, reqs, strict=True)]
        rest = [i for i, a in enumerate(answers) if a is None]
        asked = [reqs[i] for i in rest]
        if isinstance(self.durable, BatchStore):
            claims: list[Claim] = yield self.durable, _CLAIM_MANY, (asked,), _NONE
        else:
            claims = []
            for req in asked:
                claims.append((yield self.durable, _CLAIM, (req,), _NONE))
        lost = []
        for i, claim in zip(rest, claims, strict=True):
            answers[i] = claim
            if answered and copies[i] is None and claim.outcome is REPLAY:
                lost.append(claim.record)
        if lost:
            yield from self._put(lost)
        return [a for a in answers if a is not None]

    def _complete_many(self, items: Sequence[Completion]) -> Steps[list[Completed]]:
        if isinstance(self.durable, BatchStore):
            done: list[Completed] = yield self.durable, _COMPLETE_MANY, (items,), _NONE
        else:
            done = []
            for i in items:
                try:
                    args = (i.ticket, i.result, i.codec, i.ttl)
                    done.append((yield self.durable, _COMPLETE, args, _NONE))
                except LeaseLostError as exc:
                    done.append(exc)
        final = [r for r in done if isinstance(r, Record) and replayable(r)]
        if final and not self.outage.down():
            yield from self._put(final)
        return done

    def _put(self, records: list[Record]) -> Steps[None]:
        try:
            yield self.copies, _PUT_MANY, (records,), _NONE
        except StoreUnavailableError as exc:
            self.outage.failed(exc)

    def claim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]:
        return self._run(self._claim_many(reqs))

    def complete_many(self, items: Sequence[Completion]) -> list[Completed]:
        return self._run(self._complete_many(items))

    async def aclaim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]:
        return await self._arun(self._claim_many(reqs))

    async def acomplete_many(self, items: Sequence[Completion]) -> list[Completed]:
        return await self._arun(self._complete_many(items))
