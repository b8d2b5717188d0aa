"""The heartbeat timers: stopping waits for an in-flight renewal; shutdown ends the thread;
async beats share one loop timer; failures are retried on one schedule and never stop the
timer or another beat."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mideng import Guard, open_store
from mideng.errors import InProgressError, LeaseLostError, StoreUnavailableError
from mideng.guard import heartbeat
from mideng.guard.heartbeat.schedule import Lease
from mideng.guard.heartbeat.tasks import start_async
from mideng.guard.heartbeat.threads import Heartbeats
from tests.observability.test_logs import RefusingFilter


def test_stop_waits_for_an_in_flight_renewal() -> None:
    heartbeats = Heartbeats()
    entered, release = threading.Event(), threading.Event()
    renewals: list[str] = []

    def slow_renew() -> None:
        renewals.append("start")
        entered.set()
        release.wait(30)
        renewals.append("end")

    stop = heartbeats.start(0.01, slow_renew)
    assert entered.wait(30)
    stopped = threading.Event()

    def stop_then_signal() -> None:
        stop()
        stopped.set()

    stopper = threading.Thread(target=stop_then_signal)
    stopper.start()
    # The renewal is still inside the store call: stop() must not have returned.
    assert not stopped.wait(0.2)
    release.set()
    stopper.join(30)
    assert stopped.is_set()
    assert renewals == ["start", "end"]
    heartbeats.shutdown()


def test_shutdown_ends_the_timer_thread() -> None:
    heartbeats = Heartbeats()
    beats: list[int] = []
    stop = heartbeats.start(0.01, lambda: beats.append(1))
    thread = heartbeats._thread
    assert thread is not None
    heartbeats.shutdown()
    assert not thread.is_alive()
    stop()
    # After shutdown a new beat starts no thread: the interpreter is on its way out.
    heartbeats.start(0.01, lambda: beats.append(2))
    assert heartbeats._thread is None


def test_short_calls_with_a_long_lease_never_wake_the_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    heartbeats = Heartbeats()
    wakes: list[int] = []
    original = heartbeats._cond.notify

    def notify(n: int = 1) -> None:
        wakes.append(n)
        original(n)

    monkeypatch.setattr(heartbeats._cond, "notify", notify)
    heartbeats.start(20.0, lambda: None)()  # the first beat starts the thread
    thread = heartbeats._thread
    assert thread is not None
    # Wait until the thread has chosen when to wake (it sets that, then waits, under the
    # lock that start() takes): from then on it is asleep.
    deadline = time.monotonic() + 10
    while heartbeats._wake_at == float("inf"):
        assert time.monotonic() < deadline
        time.sleep(0.001)
    for _ in range(200):  # one call at a time: the table empties after each
        heartbeats.start(20.0, lambda: None)()
    assert wakes == []
    # A beat due before the thread's own wake-up does wake it.
    stop = heartbeats.start(0.01, lambda: None)
    assert wakes == [1]
    stop()
    heartbeats.shutdown()


def test_async_beats_share_one_loop_timer() -> None:
    """Short bodies arm no timer of their own (none left cancelled in the loop's heap); a due
    beat renews, re-arms, and stops when stopped or when its lease is lost."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        armed: list[float] = []
        original = loop.call_at

        def call_at(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
            armed.append(when)
            return original(when, callback, *args, **kwargs)

        loop.call_at = call_at  # type: ignore[method-assign, assignment]

        async def nothing() -> None:
            pass

        start_async(20.0, nothing)()  # the first beat arms the loop's timer
        assert len(armed) == 1
        for _ in range(200):  # one call at a time, each shorter than its period
            start_async(20.0, nothing)()
        assert len(armed) == 1

        renewals: list[float] = []
        three = asyncio.Event()

        async def renew() -> None:
            renewals.append(loop.time())
            if len(renewals) == 3:
                three.set()

        stop = start_async(0.02, renew)  # due before the armed timer: re-armed sooner
        assert len(armed) == 2
        await asyncio.wait_for(three.wait(), 10)
        stop()
        seen = len(renewals)
        await asyncio.sleep(0.1)
        assert len(renewals) == seen  # stopped: no renewal after stop()
        assert all(b > a for a, b in itertools.pairwise(renewals))

        lost: list[int] = []

        async def lose() -> None:
            lost.append(1)
            raise LeaseLostError("taken over", None)

        stop_lost = start_async(0.02, lose)
        await asyncio.sleep(0.2)
        assert lost == [1]  # a lost lease ends the renewals by itself
        stop_lost()
        loop.call_at = original  # type: ignore[method-assign]

    asyncio.run(scenario())


def test_the_schedule_retries_sooner_as_the_lease_ends_and_goes_on_after() -> None:
    """Pure: after a failure the next try is a third of what is left (at most a period, at
    least a twentieth of one); past the end, every half period; a success starts over."""
    beat = Lease(3.0, lambda: None, None, now=0.0)
    assert (beat.period, beat.deadline, beat.due) == (1.0, 3.0, 1.0)
    tries, now = [], 1.0
    while now < 3.0:
        assert beat.settle(now, now, StoreUnavailableError("down"))
        assert beat.due - now <= beat.period
        assert beat.due - now >= beat.period / 20 - 1e-12
        tries.append(beat.due)
        now = beat.due
    assert len(tries) >= 5  # many chances before the end, not one per period
    assert tries[0] == pytest.approx(1.0 + 2.0 / 3)
    assert not beat.lapsed or tries[-1] >= 3.0
    beat.settle(now, now, StoreUnavailableError("still down"))
    assert beat.lapsed
    assert beat.due == pytest.approx(now + 0.5)
    # Renewed at last (nobody took over): the lease counts from that renewal's send time.
    assert beat.settle(now + 0.5, now + 0.6, None)
    assert (beat.failures, beat.lapsed) == (0, False)
    assert beat.deadline == pytest.approx(now + 3.5)
    assert beat.due == pytest.approx(now + 1.5)
    # Only a fenced refusal ends the beat; any other error, even an unexpected one, is retried.
    assert beat.settle(now, now, RuntimeError("driver bug"))
    assert not beat.settle(now, now, LeaseLostError("taken over", None))
    assert beat.cancelled


def test_a_lost_beat_does_not_stop_the_timer() -> None:
    """The lost beat is dropped, the timer never waits forever (it died of an infinite
    timeout once), and a beat started afterwards renews."""
    heartbeats = Heartbeats()
    lost: list[int] = []

    def lose() -> None:
        lost.append(1)
        raise LeaseLostError("forgotten", None)

    heartbeats.start(0.03, lose)
    deadline = time.monotonic() + 10
    while not lost:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    renewed = threading.Event()
    stop = heartbeats.start(0.03, renewed.set)
    assert renewed.wait(10)
    stop()
    assert lost == [1]
    heartbeats.shutdown()


def test_a_timer_that_dies_is_restarted(monkeypatch: pytest.MonkeyPatch) -> None:
    heartbeats = Heartbeats()
    original = heartbeats._loop
    calls: list[int] = []

    def dies_once() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OverflowError("timestamp out of range for platform time_t")
        original()

    monkeypatch.setattr(heartbeats, "_loop", dies_once)
    before = heartbeat.stats()["restarts"]
    renewed = threading.Event()
    stop = heartbeats.start(0.03, renewed.set)
    assert renewed.wait(10)
    assert len(calls) == 2
    assert heartbeat.stats()["restarts"] == before + 1
    stop()
    heartbeats.shutdown()


def test_a_hung_renewal_holds_one_worker_not_the_timer() -> None:
    heartbeats = Heartbeats()
    release = threading.Event()
    hung = threading.Event()

    def hang() -> None:
        hung.set()
        release.wait(30)

    stop_hung = heartbeats.start(0.03, hang)
    assert hung.wait(10)
    beats: list[float] = []
    three = threading.Event()

    def count() -> None:
        beats.append(time.monotonic())
        if len(beats) == 3:
            three.set()

    stop = heartbeats.start(0.03, count)
    assert three.wait(10)  # renewed again and again while the other renewal hangs
    stop()
    release.set()
    stop_hung()
    heartbeats.shutdown()


def test_an_async_beat_whose_task_cannot_start_is_tried_again() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        original = loop.create_task
        refused: list[int] = []

        def create_task(coro: Any, **kwargs: Any) -> Any:
            if not refused and getattr(coro, "__name__", "") == "_renew":
                refused.append(1)
                coro.close()
                raise RuntimeError("no task (injected)")
            return original(coro, **kwargs)

        loop.create_task = create_task  # type: ignore[method-assign]
        renewed = asyncio.Event()

        async def renew() -> None:
            renewed.set()

        stop = start_async(0.03, renew)
        await asyncio.wait_for(renewed.wait(), 10)
        assert refused == [1]
        stop()
        loop.create_task = original  # type: ignore[method-assign]

    asyncio.run(scenario())


def test_an_async_renewal_unanswered_at_the_lease_end_is_abandoned_and_retried() -> None:
    async def scenario() -> None:
        calls: list[int] = []
        second = asyncio.Event()

        async def renew() -> None:
            calls.append(1)
            if len(calls) == 1:
                await asyncio.sleep(30)  # a half-dead connection that never answers
            second.set()

        stop = start_async(0.3, renew)
        await asyncio.wait_for(second.wait(), 10)
        assert len(calls) == 2
        stop()

    asyncio.run(scenario())


def test_a_loop_beat_has_the_fields_lease_init_gives_and_renews_through_its_store() -> None:
    """A held beat has the fields Lease's own init gives; renew_store's beat calls the store's
    aheartbeat (looked up when it renews) with the ticket, the lease and the ttl."""
    from mideng.guard.heartbeat.tasks import _loop_beats, renew_store

    async def scenario() -> None:
        loop = asyncio.get_running_loop()

        async def nothing() -> None:
            pass

        now = loop.time()
        beat = _loop_beats().hold(0.9, nothing, "what", now)
        made = Lease(0.9, nothing, "what", now)
        for name in Lease.__slots__:
            if name != "ident":
                assert getattr(beat, name) == getattr(made, name), name
        beat.stop()

        sent: list[tuple[Any, ...]] = []
        done = asyncio.Event()

        class Store:
            async def aheartbeat(self, ticket: Any, lease: float, ttl: float | None) -> None:
                sent.append((ticket, lease, ttl))
                done.set()

        store = Store()
        stop = renew_store(0.06, store, "ticket", 7.0)
        await asyncio.wait_for(done.wait(), 10)
        stop()
        assert sent[0] == ("ticket", 0.06, 7.0)

    asyncio.run(scenario())


def test_a_beat_not_yet_due_is_a_pending_entry_that_its_stop_removes() -> None:
    """Until its first renewal falls due a beat is a plain entry of the loop's beats (no beat
    object, no timer of its own); its stop function removes it, and nothing renews after."""
    from mideng.guard.heartbeat.tasks import _by_store, _loop_beats, renew_store

    async def scenario() -> None:
        renewed: list[Any] = []

        class Store:
            async def aheartbeat(self, ticket: Any, lease: float, ttl: float | None) -> None:
                renewed.append(ticket)

        store = Store()
        beats = _loop_beats()
        before = set(beats.beats)
        now = beats.loop.time()
        stop = renew_store(0.15, store, "ticket", 7.0)
        (ident,) = set(beats.beats) - before
        due, lease, renew, what, started, held_store, ttl = beats.beats[ident]  # type: ignore[misc]
        assert (lease, renew, what, held_store, ttl) == (0.15, _by_store, "ticket", store, 7.0)
        assert started == pytest.approx(now, abs=0.05)
        assert due == pytest.approx(started + 0.05)
        stop()
        assert ident not in beats.beats
        await asyncio.sleep(0.3)  # past two periods: a beat left behind would have renewed
        assert renewed == []

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_an_async_beat_whose_failure_line_raises_goes_on_renewing(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One renewal fails and its WARNING raises in the application's filter: the beat still
    renews, so a retry while the body runs finds it in progress and the body runs once."""
    store = open_store("memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'm.db'}")
    renew = store.aheartbeat
    failed: list[int] = []

    async def blink(ticket: Any, lease: float, ttl: float | None) -> Any:
        if not failed:
            failed.append(1)
            raise StoreUnavailableError("connection reset (injected)")
        return await renew(ticket, lease, ttl)

    monkeypatch.setattr(store, "aheartbeat", blink)
    hook = RefusingFilter()
    logger = logging.getLogger("mideng")
    logger.addFilter(hook)
    guard = Guard(store, lease=0.3)
    runs: list[int] = []

    async def slow() -> str:
        runs.append(1)
        await asyncio.sleep(1.2)  # four leases: held only by its renewals
        return "done"

    async def scenario() -> None:
        first = asyncio.create_task(guard.arun("jobs", "j-1", slow))
        await asyncio.sleep(0.9)  # the lease would have run out twice without renewals
        with pytest.raises(InProgressError):
            await guard.arun("jobs", "j-1", slow)
        assert await first == "done"

    try:
        asyncio.run(scenario())
    finally:
        logger.removeFilter(hook)
        guard.close()
    assert failed == [1]
    assert "heartbeat" in hook.refused[0]
    assert runs == [1]
