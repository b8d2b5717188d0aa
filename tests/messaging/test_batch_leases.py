"""A batch's claims are all made at once but its handlers run one after another: every key of
the batch keeps its lease until its completion is written, and a key whose lease is no longer
known to hold when its turn comes is not started, so a copy elsewhere (or a stream's
pending-entry claim) that took it over is the only run."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

from mideng import Guard
from mideng.core.record import Ticket
from mideng.errors import StoreUnavailableError
from mideng.messaging import Ack, IdempotentConsumer, Message, Retry, Verdict
from mideng.stores.memory import MemoryStore

LEASE = 0.3


def msg(key: str) -> Message:
    return Message(b"{}", {"idempotency-key": key}, id=f"m-{key}")


class Runs:
    """Counts runs per key; the first key of a batch is slow (three leases long)."""

    def __init__(self, slow: str = "order:1", hold: float = 3 * LEASE) -> None:
        self.counts: Counter[str] = Counter()
        self.slow, self.hold = slow, hold
        self.started = asyncio.Event()

    async def __call__(self, message: Message) -> None:
        key = message.headers["idempotency-key"]
        self.counts[key] += 1
        if key == self.slow:
            self.started.set()
            await asyncio.sleep(self.hold)


class DeafStore(MemoryStore):
    """Refuses the renewals of one key (every one, or the first ``times``), as a store that
    keeps timing out, or times out once, would."""

    def __init__(self, deaf: str, times: int | None = None) -> None:
        super().__init__()
        self.deaf, self.times = deaf, times
        self.refused = 0

    def heartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Any:
        if ticket.key == self.deaf and (self.times is None or self.refused < self.times):
            self.refused += 1
            raise StoreUnavailableError("renewal timed out")
        return super().heartbeat(ticket, lease, ttl)


def pair(store: MemoryStore, runs: Runs, **options: Any) -> tuple[IdempotentConsumer, ...]:
    guard = Guard(store, lease=LEASE)
    options.setdefault("retry_delay", 0.05)
    first = IdempotentConsumer(guard, "stock", runs, **options)
    other = IdempotentConsumer(guard, "stock", runs, **options)  # a second worker
    return first, other


async def copy_while_first_runs(
    first: IdempotentConsumer, other: IdempotentConsumer, runs: Runs
) -> tuple[list[Verdict], Verdict]:
    batch = asyncio.ensure_future(first.handle_batch([msg("order:1"), msg("order:2")]))
    await asyncio.wait_for(runs.started.wait(), 5)
    await asyncio.sleep(2.5 * LEASE)  # order:2 waits behind the slow handler past its lease
    copy = await other.handle(msg("order:2"))
    return await batch, copy


def test_a_key_waiting_behind_a_slow_handler_keeps_its_lease() -> None:
    runs = Runs()
    first, other = pair(MemoryStore(), runs)
    verdicts, copy = asyncio.run(copy_while_first_runs(first, other, runs))
    assert isinstance(copy, Retry)
    assert "in flight" in copy.reason
    assert verdicts == [Ack(ran=True), Ack(ran=True)]
    assert runs.counts == {"order:1": 1, "order:2": 1}


def test_a_key_whose_renewals_failed_is_not_started_and_runs_once_elsewhere() -> None:
    store = DeafStore("order:2")
    runs = Runs()
    first, other = pair(store, runs)
    verdicts, copy = asyncio.run(copy_while_first_runs(first, other, runs))
    assert store.refused >= 2  # renewals of order:2 were tried and failed
    assert copy == Ack(ran=True)  # the lease had ended: the copy took the key over and ran
    assert verdicts[0] == Ack(ran=True)
    assert isinstance(verdicts[1], Retry)
    assert "not held" in verdicts[1].reason
    assert runs.counts == {"order:1": 1, "order:2": 1}


def test_a_renewal_that_fails_once_is_retried_and_the_key_still_runs_once_here() -> None:
    store = DeafStore("order:2", times=1)
    runs = Runs()
    first, other = pair(store, runs)
    verdicts, copy = asyncio.run(copy_while_first_runs(first, other, runs))
    assert store.refused == 1
    assert isinstance(copy, Retry)  # the retried renewal kept the lease: still in flight here
    assert verdicts == [Ack(ran=True), Ack(ran=True)]
    assert runs.counts == {"order:1": 1, "order:2": 1}


def test_without_heartbeats_a_key_whose_lease_ran_out_in_the_batch_is_not_started() -> None:
    runs = Runs()
    first, other = pair(MemoryStore(), runs, heartbeat=False)
    verdicts, copy = asyncio.run(copy_while_first_runs(first, other, runs))
    assert copy == Ack(ran=True)
    assert isinstance(verdicts[1], Retry)
    assert runs.counts == {"order:1": 1, "order:2": 1}


def test_a_short_batch_still_runs_every_key() -> None:
    runs = Runs(hold=0.0)
    first, _ = pair(MemoryStore(), runs)
    keys = [f"order:{n}" for n in range(1, 51)]
    verdicts = asyncio.run(first.handle_batch([msg(k) for k in keys]))
    assert verdicts == [Ack(ran=True)] * 50
    assert runs.counts == dict.fromkeys(keys, 1)


def test_a_cancelled_batch_gives_back_the_keys_it_had_not_started() -> None:
    runs = Runs(hold=60.0)
    first, other = pair(MemoryStore(), runs)

    async def scenario() -> Verdict:
        batch = asyncio.ensure_future(first.handle_batch([msg("order:1"), msg("order:2")]))
        await asyncio.wait_for(runs.started.wait(), 5)
        batch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await batch
        return await other.handle(msg("order:2"))  # at once: no lease to wait out

    assert asyncio.run(scenario()) == Ack(ran=True)
    assert runs.counts == {"order:1": 1, "order:2": 1}
