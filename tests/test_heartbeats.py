"""The heartbeat timer: stopping waits for an in-flight renewal; shutdown ends the thread."""

from __future__ import annotations

import threading
import time

import pytest

from mideng.heartbeat import Heartbeats


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
