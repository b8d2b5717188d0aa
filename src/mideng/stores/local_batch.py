"""The batch capability for the embedded stores (memory, SQLite): the single operations in
a loop. There is no round trip to save in-process, and each claim stays its own short
transaction, so a batch holds no lock longer than one claim does."""

from __future__ import annotations

from collections.abc import Sequence

from mideng.core.record import Claim, ClaimRequest
from mideng.errors import LeaseLostError
from mideng.stores.base import LocalStore
from mideng.stores.batch import BatchStore, Completed, Completion, distinct


class LocalBatch(LocalStore, BatchStore):
    """Mixed into MemoryStore and SQLiteStore; the async twins offload as theirs do."""

    def claim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]:
        distinct(reqs)
        return [self.claim(r) for r in reqs]

    def complete_many(self, items: Sequence[Completion]) -> list[Completed]:
        out: list[Completed] = []
        for item in items:
            try:
                out.append(self.complete(item.ticket, item.result, item.codec, item.ttl))
            except LeaseLostError as exc:
                out.append(exc)
        return out

    async def aclaim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]:
        return await self._offload(self.claim_many, reqs)

    async def acomplete_many(self, items: Sequence[Completion]) -> list[Completed]:
        return await self._offload(self.complete_many, items)
