"""The heartbeat timers: stopping waits for an in-flight renewal; shutdown ends the thread;
async beats share one loop timer."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

import pytest

from mideng.errors import LeaseLostError
from mideng.heartbeat import Heartbeats, start_async


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
