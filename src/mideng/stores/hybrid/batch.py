"""The batch capability on the hybrid store, written once as procedures of store calls like its
other operations (mideng.core.effects).

A batch claim reads the whole batch's Redis copies in one pipeline; keys a finished copy
answers go no further, the rest are claimed together on the durable store (its own batch
claim when it has one, else one claim each), and copies Redis lost are put back in one
pipeline. A batch completion completes on the durable store, then copies what finished to
Redis in one pipeline, best effort, as a single completion does.
"""

from __future__ import annotations

from collections.abc import Sequence

from mideng.core import effects
from mideng.core.effects import Effects
from mideng.core.record import REPLAY, Claim, ClaimRequest, Record
from mideng.errors import LeaseLostError, StoreUnavailableError
from mideng.stores.batch import BatchStore, Completed, Completion, distinct
from mideng.stores.hybrid.store import HybridStore, from_copy, replayable


class HybridBatch(HybridStore, BatchStore):
    """HybridStore with batches; what ``open_store(redis_url, durable=...)`` builds."""

    def _claim_many(self, reqs: Sequence[ClaimRequest]) -> Effects[list[Claim]]:
        distinct(reqs)
        copies: list[Record | None] = [None] * len(reqs)
        answered = False
        if not self.outage.down():
            try:
                gets = [self.fast.commands.get(r.scope, r.key) for r in reqs]
                copies = yield effects.call(self.fast.run_many, self.fast.arun_many, gets)
                answered = True
            except StoreUnavailableError as exc:
                self.outage.failed(exc)
        answers = [from_copy(c, r) for c, r in zip(copies, reqs, strict=True)]
        rest = [i for i, a in enumerate(answers) if a is None]
        asked = [reqs[i] for i in rest]
        durable = self.durable
        if isinstance(durable, BatchStore):
            claims: list[Claim] = yield effects.call(durable.claim_many, durable.aclaim_many, asked)
        else:
            claims = []
            for req in asked:
                claims.append((yield effects.call(durable.claim, durable.aclaim, req)))
        lost = []
        for i, claim in zip(rest, claims, strict=True):
            answers[i] = claim
            if answered and copies[i] is None and claim.outcome is REPLAY:
                lost.append(claim.record)
        if lost:
            yield from self._put(lost)
        return [a for a in answers if a is not None]

    def _complete_many(self, items: Sequence[Completion]) -> Effects[list[Completed]]:
        durable = self.durable
        if isinstance(durable, BatchStore):
            done: list[Completed] = yield effects.call(
                durable.complete_many, durable.acomplete_many, items
            )
        else:
            done = []
            for i in items:
                try:
                    done.append((yield self._completed(i.ticket, i.result, i.codec, i.ttl)))
                except LeaseLostError as exc:
                    done.append(exc)
        final = [r for r in done if isinstance(r, Record) and replayable(r)]
        if final and not self.outage.down():
            yield from self._put(final)
        return done

    def _put(self, records: list[Record]) -> Effects[None]:
        try:
            puts = [self.fast.commands.put(r) for r in records]
            yield effects.call(self.fast.run_many, self.fast.arun_many, puts)
        except StoreUnavailableError as exc:
            self.outage.failed(exc)

    def claim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]:
        return effects.run(self._claim_many(reqs))

    def complete_many(self, items: Sequence[Completion]) -> list[Completed]:
        return effects.run(self._complete_many(items))

    async def aclaim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]:
        return await effects.arun(self._claim_many(reqs))

    async def acomplete_many(self, items: Sequence[Completion]) -> list[Completed]:
        return await effects.arun(self._complete_many(items))
