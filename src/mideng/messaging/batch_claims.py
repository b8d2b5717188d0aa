"""A batch's claims: claimed in one round trip, held while its handlers run one after another,
completed in one round trip.

A store with ``mideng.stores.batch.BatchStore`` gets one round trip per batch; any other store
gets the single operations, run concurrently, with the same answers in the same order. A store
seen counted (metrics on) is asked for its batch operations behind the view: metrics count
single record operations only.

A consumer claims a whole fetched batch at once, so every lease of the batch starts then,
while the handlers run in turn: the last key of a batch of slow handlers would wait past its
lease, be taken over (by a copy of the message elsewhere, or a stream's pending-entry claim)
and then run here too. So each key is renewed from its claim until its completion is written
(``BatchHold``), and a key whose lease is no longer known to hold when its turn comes is not
started.

One beat renews the whole batch: each renewal renews every key still held, concurrently, and
each key keeps its own end (the lease from the last renewal of it that succeeded). A key whose
renewal was fenced (taken over, forgotten) is held no more; one whose renewal failed otherwise
fails the beat's renewal, so the beat tries again sooner and sooner as the lease's end nears,
as a key's own beat would (mideng.guard.heartbeat.schedule), renewing the others too. A beat
per key cost a timer entry, a closure and a lease schedule per message, where most batches end
long before their first renewal is due.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from mideng.core.event_loop import running_loop
from mideng.core.record import Claim, ClaimRequest, Ticket
from mideng.errors import LeaseLostError
from mideng.guard.heartbeat.schedule import STATS
from mideng.guard.heartbeat.tasks import AsyncBeat, hold_async
from mideng.observability import logs
from mideng.observability.store_metrics import uncounted
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


# A batch's handler starts only while at least this share of its lease is known to remain: with
# renewals working that is always so (each renews at a third), so only failed renewals stop it.
START_SHARE = 1 / 3


class _Failing:
    """What the batch beat's log lines name: its scope and the keys whose renewal failed."""

    __slots__ = ("failing", "scope")

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self.failing: list[str] = []

    @property
    def key(self) -> str:
        return ",".join(self.failing)


class BatchHold:
    """The claims of one batch, by position: renewed from ``sent`` (the loop's time when the
    claim was sent) until ``release(n)`` or ``stop()``; ``holds(n)`` says whether key ``n``
    may start."""

    __slots__ = (
        "beat",
        "count",
        "ends",
        "held",
        "lease",
        "loop",
        "name",
        "store",
        "tickets",
        "ttl",
    )

    def __init__(
        self,
        store: Any,
        tickets: Sequence[Ticket | None],
        lease: float,
        ttl: float | None,
        heartbeat: bool,
        sent: float,
    ) -> None:
        self.store, self.lease, self.ttl = store, lease, ttl
        self.loop = running_loop()
        self.tickets = tickets  # None: not acquired, nothing to hold
        self.held = [t is not None for t in tickets]
        self.count = sum(self.held)  # keys still held
        self.ends = [sent + lease] * len(tickets)  # each key's lease end as known here
        self.name = _Failing(tickets[0].scope if tickets and tickets[0] else "")
        self.beat: AsyncBeat | None = None
        if heartbeat and self.count:
            self.beat = hold_async(lease, self._renew, self.name, sent)

    async def _renew(self) -> None:
        live = [n for n, held in enumerate(self.held) if held]
        if not live:
            return
        sent = self.loop.time()
        answers = await asyncio.gather(
            *(self._one(self.tickets[n]) for n in live), return_exceptions=True
        )
        failed: BaseException | None = None
        failing: list[str] = []
        for n, answer in zip(live, answers, strict=True):
            if answer is None:
                self.ends[n] = sent + self.lease
            elif not self.held[n]:
                continue  # settled while its renewal was out: its answer no longer matters
            elif isinstance(answer, LeaseLostError):
                # Fenced: this key is someone else's now; the batch's others go on (the beat
                # is not stopped from inside its own renewal: with none left it idles).
                self.held[n] = False
                self.count -= 1
                logs.heartbeat_lost(self.tickets[n], answer)
                STATS.add("lost")
            else:
                failed = answer
                failing.append(self.ticket(n).key)
        self.name.failing = failing
        if failed is not None:
            raise failed

    async def _one(self, ticket: Ticket | None) -> None:
        await self.store.aheartbeat(ticket, self.lease, self.ttl)

    def ticket(self, n: int) -> Ticket:
        ticket = self.tickets[n]
        assert ticket is not None
        return ticket

    def holds(self, n: int) -> bool:
        """Whether key ``n`` is known to keep its lease for a share of it from now: not
        fenced, and renewed recently enough (a lease whose renewals failed may be taken over
        as soon as it ends, so no new work should start under it)."""
        if not self.held[n] or (self.beat is not None and self.beat.cancelled):
            return False
        left = self.ends[n] - self.loop.time()
        return left >= self.lease * START_SHARE

    def release(self, n: int) -> None:
        """Renew key ``n`` no more (it was settled otherwise, or is not to be started)."""
        if self.held[n]:
            self.held[n] = False
            self.count -= 1
            if self.count == 0 and self.beat is not None:
                self.beat.stop()

    def unstarted(self, started: set[int]) -> list[Ticket]:
        """The tickets still held of the keys not in ``started``."""
        out = []
        for n, ticket in enumerate(self.tickets):
            if ticket is not None and self.held[n] and n not in started:
                out.append(ticket)
        return out

    def stop(self) -> None:
        self.held = [False] * len(self.tickets)
        self.count = 0
        if self.beat is not None:
            self.beat.stop()
