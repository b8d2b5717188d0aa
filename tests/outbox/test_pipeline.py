"""Two batches in flight (mideng.outbox.pipeline): one is written back while the next is
claimed and published. Per-key order holds under a storm across many keys, a database error at
any step of a write-back or a claim in the middle of the pipeline loses nothing and puts no key
out of order, and the pipeline's rules (when claiming ends, errors after draining) hold."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from mideng.messaging.publish import Outgoing
from mideng.outbox import Relay
from mideng.outbox.pipeline import Batch, drain
from tests.outbox.conftest import Db, fill
from tests.outbox.recording import Recording
from tests.outbox.storm import Storm, arrival


@dataclass
class Timeline:
    """When each relay's batches published and wrote back, from the relays' own steps (per
    relay: two relays side by side overlap without any pipeline)."""

    publishing: list[tuple[int, float, float]] = field(default_factory=list)
    writing: list[tuple[int, float, float]] = field(default_factory=list)
    per_relay: Counter[int] = field(default_factory=Counter)
    most_in_flight: int = 0
    reached: dict[int, asyncio.Event] = field(default_factory=dict)

    @property
    def in_flight(self) -> int:
        return sum(self.per_relay.values())

    async def until_in_flight(self, count: int, timeout: float) -> None:
        """Until ``count`` batches are in flight at once (or ``timeout``: then the test's own
        assertions say what was in flight)."""
        event = self.reached.setdefault(count, asyncio.Event())
        if self.in_flight >= count:
            event.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    def overlapped(self) -> int:
        """Write-backs during which another batch of the same relay was publishing."""
        return sum(
            1
            for relay, w_start, w_end in self.writing
            if any(
                other == relay and p_start < w_end and w_start < p_end
                for other, p_start, p_end in self.publishing
            )
        )


@pytest.fixture
def timeline(monkeypatch: pytest.MonkeyPatch) -> Timeline:
    seen = Timeline()
    publish, finish = Relay._publish, Relay._finish

    async def timed_publish(self: Relay, *args: Any) -> Any:
        start = time.monotonic()
        try:
            return await publish(self, *args)
        finally:
            seen.publishing.append((id(self), start, time.monotonic()))

    async def timed_finish(self: Relay, *args: Any) -> Any:
        seen.per_relay[id(self)] += 1
        seen.most_in_flight = max(seen.most_in_flight, seen.per_relay[id(self)])
        for count, event in seen.reached.items():
            if seen.in_flight >= count:
                event.set()
        try:
            return await finish(self, *args)
        finally:
            seen.per_relay[id(self)] -= 1

    async def timed_settle(self: Relay, make: Any, *args: Any, **options: Any) -> Any:
        start = time.monotonic()
        try:
            return await transact(self, make, *args, **options)
        finally:
            if make().__name__ == "settle":
                seen.writing.append((id(self), start, time.monotonic()))

    transact = Relay._transact
    monkeypatch.setattr(Relay, "_publish", timed_publish)
    monkeypatch.setattr(Relay, "_finish", timed_finish)
    monkeypatch.setattr(Relay, "_transact", timed_settle)
    return seen


def _first_arrivals_in_order(sent: list[Outgoing]) -> bool:
    seen: dict[str, list[int]] = {}
    first = set()
    for message in sent:
        if message.message_id not in first and message.key is not None:
            seen.setdefault(message.key, []).append(json.loads(message.body)["n"])
        first.add(message.message_id)
    return all(ns == sorted(ns) for ns in seen.values())


@pytest.mark.slow
def test_key_order_holds_with_two_batches_in_flight_under_a_storm(
    server_db: Db, timeline: Timeline
) -> None:
    """1,000 transactions over 120 keys from 8 threads, half rolled back; two relays, each
    with two batches of 6 keys in flight. Every committed message arrives exactly once (a
    batch that read a key another still held would publish its rows again), first arrivals
    per key in commit order, and write-backs did overlap other batches' publishes."""
    publisher = Recording(delay=0.001)
    storm = Storm(server_db, "orders", keys=120)
    try:
        asyncio.run(storm.run(publisher, batch_keys=6, batch_rows=30, depth=2, listen=False))
        arrivals = [arrival(m.message_id, m.body, dict(m.headers)) for m in publisher.sent]
        storm.check(arrivals)
        assert len(arrivals) == len(storm.committed)
    finally:
        storm.drop()
    assert timeline.most_in_flight >= 2  # within one relay
    assert timeline.overlapped() > 0


def _failing_at(
    name: str, step: int, call: int, seen: Timeline, hit: list[int], publisher: Recording
) -> Any:
    """A ``_transact`` that breaks the ``call``-th ``name`` operation before its ``step``-th
    statement runs (``step`` past its last: at commit, so the transaction rolls back), once
    the other batch is in flight; notes how many batches were in flight when it broke. From
    the moment that operation starts until it breaks, publishes wait, so the other batch is
    still in flight however slowly the statements before the break run."""
    real = Relay._transact
    calls = Counter[str]()
    others = 2 if name == "settle" else 1  # a write-back's own batch counts, a claim has none

    def broke() -> None:
        hit.append(seen.in_flight)
        assert publisher.held is not None
        publisher.held.set()

    def broken(op: Any) -> Any:
        reply, index = None, 0
        while True:
            try:
                stmt = op.send(reply)
            except StopIteration:
                broke()
                raise ConnectionError(f"database gone at {name}'s commit") from None
            if index == step:
                broke()
                raise ConnectionError(f"database gone at {name}'s statement {step}")
            reply = yield stmt
            index += 1

    async def failing(self: Relay, make: Any, *args: Any, **options: Any) -> Any:
        op_name = make().__name__
        calls[op_name] += 1
        if op_name == name and calls[op_name] == call:
            publisher.held = asyncio.Event()
            await seen.until_in_flight(others, 20)  # a pipeline claims the next batch now
            return await real(self, lambda: broken(make()), *args, **options)
        return await real(self, make, *args, **options)

    return failing


@pytest.mark.parametrize(
    ("name", "step", "call"),
    [*(("settle", step, 1) for step in range(5)), *(("claim", step, 2) for step in range(3))],
)
def test_a_database_error_mid_pipeline_loses_nothing_and_keeps_key_order(
    db: Db, timeline: Timeline, monkeypatch: pytest.MonkeyPatch, name: str, step: int, call: int
) -> None:
    """The first batch's write-back (each statement of it, and its commit), or the second
    batch's claim, fails while the other batch is in flight. ``run_once`` finishes the other
    batch, then raises; the broken batch's rows, published but not written back, are
    published again with the same ids once its lease lapses, and only they."""
    ids = fill(db, keys=12, per_key=4, unkeyed=3)
    publisher = Recording(delay=0.002)
    hit: list[int] = []
    claimed: list[set[str]] = []
    monkeypatch.setattr(Relay, "_transact", _failing_at(name, step, call, timeline, hit, publisher))
    claim = Relay._claim

    async def recorded_claim(self: Relay) -> Any:
        work = await claim(self)
        claimed.append({row.id for row in work.rows} if work is not None else set())
        return work

    monkeypatch.setattr(Relay, "_claim", recorded_claim)

    async def main() -> None:
        relay = Relay(
            db.engine,
            publisher,
            table=db.table,
            listen=False,
            lease=0.8,
            depth=2,
            batch_keys=4,
            batch_rows=10,
        )
        async with relay:
            with pytest.raises(ConnectionError):
                await relay.run_once()
            assert hit == [2 if name == "settle" else 1]  # the other batch was in flight
            assert timeline.in_flight == 0  # and was finished before run_once raised
            await relay.run_once()
            await asyncio.sleep(0.9)  # the broken batch's lease lapses
            await relay.run_once()

    asyncio.run(main())
    counted = Counter(message.message_id for message in publisher.sent)
    assert set(counted) == set(ids)
    assert _first_arrivals_in_order(publisher.sent)
    assert all(row["state"] == 1 for row in db.rows())
    assert all(key["pending"] == 0 and key["claimed_by"] is None for key in db.key_rows())
    again = {message_id for message_id, n in counted.items() if n > 1}
    if name == "claim":
        assert not again  # a claim that failed published nothing
    else:
        assert again == claimed[0]  # exactly the batch whose write-back failed


def test_drain_claims_again_when_a_batch_in_flight_lets_go_and_stops_on_a_silent_batch() -> None:
    claims: list[str] = []
    queue = ["a", None, "b", None, None]

    async def claim() -> str | None:
        item = queue.pop(0)
        claims.append(str(item))
        return item

    async def finish(work: str) -> Batch:
        await asyncio.sleep(0.01)
        return Batch(1, 1, 0, 0)

    total = asyncio.run(drain(claim, finish, 2))
    # "a" in flight: a claim finds nothing, so it waits for "a" and claims again; the last
    # claim finds nothing with nothing in flight: done.
    assert claims == ["a", "None", "b", "None", "None"]
    assert total == Batch(2, 2, 0, 0)

    async def silent(work: str) -> Batch:
        return Batch(1, 0, 1, 0)

    many = ["x", "y", "z", "w"]

    async def claim_many() -> str | None:
        return many.pop(0) if many else None

    total = asyncio.run(drain(claim_many, silent, 1))
    assert total == Batch(1, 0, 1, 0)  # a batch that sent nothing ends the claiming
    assert many == ["y", "z", "w"]


def test_drain_finishes_every_batch_in_flight_before_raising() -> None:
    works: list[str | None] = ["slow", "broken", None]
    finished: list[str] = []

    async def claim() -> str | None:
        return works.pop(0)

    async def finish(work: str) -> Batch:
        if work == "broken":
            raise ConnectionError("write-back failed")
        await asyncio.sleep(0.05)
        finished.append(work)
        return Batch(1, 1, 0, 0)

    with pytest.raises(ConnectionError):
        asyncio.run(drain(claim, finish, 2))
    assert works == [None]  # no claim after the error
    assert finished == ["slow"]  # the error waited for the slow batch's write-back
