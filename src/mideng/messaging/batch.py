"""A consumer's store calls for a batch: the store's batch capability, or the single calls.

A store with ``mideng.stores.batch.BatchStore`` gets one round trip per batch; any other store
gets the single operations, run concurrently, with the same answers in the same order. A store
seen counted (metrics on) is asked for its batch operations behind the view: metrics count
single record operations only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from mideng.core.record import Claim, ClaimRequest
from mideng.errors import LeaseLostError
from mideng.observability.instrument import uncounted
from mideng.stores.base import RecordStore
from mideng.stores.batch import BatchStore, Completed, Completion


async def claim_all(store: RecordStore, reqs: Sequence[ClaimRequest]) -> list[Claim]:
    if not reqs:
        return []
    batch = uncounted(store)
    if isinstance(batch, BatchStore):
        return await batch.aclaim_many(reqs)
    return list(await asyncio.gather(*(store.aclaim(r) for r in reqs)))


async def complete_all(store: RecordStore, items: Sequence[Completion]) -> list[Completed]:
    if not items:
        return []
    batch = uncounted(store)
    if isinstance(batch, BatchStore):
        return await batch.acomplete_many(items)

    async def one(item: Completion) -> Completed:
        try:
            return await store.acomplete(item.ticket, item.result, item.codec, item.ttl)
        except LeaseLostError as exc:
            return exc

    return list(await asyncio.gather(*(one(i) for i in items)))
