"""A consumer's store calls for a batch: the store's batch capability, or the single calls.

A store with ``mideng.stores.batch.BatchStore`` gets one round trip per batch; any other store
gets the single operations, run concurrently, with the same answers in the same order. A
batch's calls after its first are made like it (``like``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from mideng.core.flow import Call
from mideng.core.record import Claim, ClaimRequest, blank
from mideng.errors import LeaseLostError
from mideng.guard.owners import OWNERS
from mideng.stores.base import RecordStore
from mideng.stores.batch import BatchStore, Completed, Completion


async def claim_all(store: RecordStore, reqs: Sequence[ClaimRequest]) -> list[Claim]:
    if not reqs:
        return []
    if isinstance(store, BatchStore):
        return await store.aclaim_many(reqs)
    return list(await asyncio.gather(*(store.aclaim(r) for r in reqs)))


async def complete_all(store: RecordStore, items: Sequence[Completion]) -> list[Completed]:
    if not items:
        return []
    if isinstance(store, BatchStore):
        return await store.acomplete_many(items)

    async def one(item: Completion) -> Completed:
        try:
            return await store.acomplete(item.ticket, item.result, item.codec, item.ttl)
        except LeaseLostError as exc:
            return exc

    return list(await asyncio.gather(*(one(i) for i in items)))


def like(first: Call, key: str, request_id: str | None) -> Call:
    """The call ``prepare`` would make for another key of the batch: the same scope, policy
    and handler (so the same terms), its own owner, key and request id. ``key_of`` checked
    the key as ``prepare`` does; a consumer's claims carry no payload, so no fingerprint."""
    call = blank(Call)  # every field, as Guard.prepare sets them
    call.scope, call.key, call.owner = first.scope, key, next(OWNERS.ids)
    call.lease, call.ttl, call.fingerprint = first.lease, first.ttl, first.fingerprint
    call.on_expiry, call.request_id = first.on_expiry, request_id
    call.max_attempts, call.policy = first.max_attempts, first.policy
    call.started, call.type_hint = time.monotonic(), first.type_hint
    call.polls, call.duplicate = 0, None
    return call
