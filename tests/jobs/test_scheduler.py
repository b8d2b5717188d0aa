"""The scheduler: which slots a pass runs by the missed policy, what the overlap policy lets
start, and several schedulers — threads and event loops, host clocks seconds apart — on one
store running each slot once; stop() lets the running job end."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from mideng import Guard
from mideng.core import effects
from mideng.core.record import ClaimRequest, ExpiryPolicy
from mideng.errors import ConfigurationError, StoreUnavailableError
from mideng.jobs import Every, Job, JobContext, Missed, Overlap, Scheduler, slot_key
from mideng.jobs.scheduler import Due, due, first_last
from mideng.jobs.slots import previous_clear
from mideng.stores.memory import MemoryStore
from mideng.stores.sqlite import SQLiteStore


def job_of(fn: Any = lambda context: None, seconds: int = 10, **options: Any) -> Job:
    return Job(f"j{uuid.uuid4().hex[:8]}", fn, Every(seconds), **options)


def test_the_missed_policy_picks_the_slots_a_pass_runs() -> None:
    # The last pass handled slot 100; it is now 145.5: slots 110..140 have started.
    now = 145.5
    assert due(job_of(missed=Missed.LATEST), 100.0, now) == Due([140.0], [110.0, 120.0, 130.0])
    assert due(job_of(missed=Missed.ALL), 100.0, now) == Due([110.0, 120.0, 130.0, 140.0])
    # skip: the current slot only while it is no later than its grace.
    assert due(job_of(missed=Missed.SKIP, grace=6.0), 100.0, now) == Due(
        [140.0], [110.0, 120.0, 130.0]
    )
    assert due(job_of(missed=Missed.SKIP, grace=5.0), 100.0, now) == Due(
        [], [110.0, 120.0, 130.0, 140.0]
    )
    assert due(job_of(), 140.0, now) == Due()  # nothing new since the last pass


def test_a_starting_scheduler_looks_back_catch_up_slots() -> None:
    assert first_last(job_of(), 145.5) == 130.0  # the current slot (140) is due
    assert first_last(job_of(catch_up=3), 145.5) == 100.0  # and 110, 120, 130
    assert due(job_of(catch_up=3, missed=Missed.ALL), 100.0, 145.5).run == [110, 120, 130, 140]


def hold_previous(store: Any, job: Job, slot: float, lease: float) -> None:
    previous = slot_key(slot - job.schedule.seconds)  # type: ignore[attr-defined]
    req = ClaimRequest(job.scope, previous, "elsewhere", lease, 60.0, None, ExpiryPolicy.TAKE_OVER)
    assert store.claim(req).acquired


def test_the_overlap_policy_while_the_previous_slot_is_held() -> None:
    store = MemoryStore()
    slot = Every(10).slot_at(time.time())
    never = lambda: False  # noqa: E731
    for overlap, clear in ((Overlap.SKIP, False), (Overlap.BESIDE, True)):
        job = job_of(overlap=overlap)
        hold_previous(store, job, slot, 30.0)
        assert effects.run(previous_clear(store, job, slot, never)) is clear
    # wait: until the previous holder's lease ends (it died), then the slot starts.
    job = job_of(overlap=Overlap.WAIT)
    hold_previous(store, job, slot, 0.4)
    began = time.monotonic()
    assert effects.run(previous_clear(store, job, slot, never)) is True
    assert time.monotonic() - began >= 0.35
    # A previous slot that is done, or absent, holds nothing up.
    assert effects.run(previous_clear(store, job_of(overlap=Overlap.SKIP), slot, never)) is True


def test_bad_jobs_and_schedulers_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="missed must be one of latest, all, skip"):
        job_of(missed="sometimes")
    with pytest.raises(ConfigurationError, match="catch_up"):
        job_of(catch_up=-1)
    with pytest.raises(ConfigurationError, match="every="):
        Every(0)
    with pytest.raises(ConfigurationError, match="at least one job"):
        Scheduler(Guard(MemoryStore()), [])
    job = job_of()
    with pytest.raises(ConfigurationError, match="one name"):
        Scheduler(Guard(MemoryStore()), [job, job])


def run_for(seconds: float, schedulers: list[Scheduler], threads: list[threading.Thread]) -> None:
    """Start ``threads`` (each running one of ``schedulers``), stop them all after ``seconds``,
    and see every thread end."""
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    for scheduler in schedulers:
        scheduler.stop()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive()


def shifted(seconds: float) -> Callable[[], float]:
    """A host clock ``seconds`` off the true time."""
    return lambda: time.time() + seconds


def test_schedulers_on_threads_and_event_loops_run_each_slot_once(tmp_path: Path) -> None:
    """Two blocking and two async schedulers, host clocks -3 s .. +3 s, one SQLite store."""
    path = str(tmp_path / "jobs.db")
    ran: Counter[str] = Counter()
    lock = threading.Lock()

    def tick(context: JobContext) -> None:
        with lock:
            ran[context.key] += 1
        time.sleep(0.05)

    job = Job(f"tick{uuid.uuid4().hex[:6]}", tick, Every(1), missed=Missed.ALL)
    guards = [Guard(SQLiteStore(path)) for _ in range(4)]
    schedulers = [
        Scheduler(guard, [job], host_clock=shifted(shift))
        for guard, shift in zip(guards, (-3.0, -1.0, 1.0, 3.0), strict=True)
    ]
    threads = [threading.Thread(target=s.run) for s in schedulers[:2]]
    threads += [threading.Thread(target=asyncio.run, args=(s.arun(),)) for s in schedulers[2:]]
    run_for(3.5, schedulers, threads)
    assert len(ran) >= 3
    assert set(ran.values()) == {1}, ran
    # missed="all": no second between the first slot run and the last is left out.
    starts = sorted(datetime.strptime(k, "%Y-%m-%dT%H:%M:%S%z").timestamp() for k in ran)
    assert starts == [starts[0] + n for n in range(len(starts))]
    for guard in guards:
        guard.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_stop_lets_the_running_job_end(mode: str) -> None:
    started, ended = threading.Event(), threading.Event()

    def slow(context: JobContext) -> None:
        started.set()
        time.sleep(0.5)
        ended.set()

    scheduler = Scheduler(Guard(MemoryStore()), [Job("slow", slow, Every(1))])
    target = scheduler.run if mode == "sync" else lambda: asyncio.run(scheduler.arun())
    thread = threading.Thread(target=target)
    thread.start()
    assert started.wait(5)
    scheduler.stop()
    thread.join(5)
    assert not thread.is_alive()
    assert ended.is_set()


class FlakyClockStore(MemoryStore):
    """A store whose clock fails the first ``failures`` reads with ``error``."""

    def __init__(self, failures: int, error: Exception) -> None:
        super().__init__()
        self.failures, self.error = failures, error

    def now(self) -> float:
        if self.failures > 0:
            self.failures -= 1
            raise self.error
        return super().now()


def test_a_store_down_at_start_is_read_again_until_it_answers() -> None:
    ran = threading.Event()
    store = FlakyClockStore(2, StoreUnavailableError("the store is restarting"))
    scheduler = Scheduler(Guard(store), [Job("up", lambda context: ran.set(), Every(1))])
    thread = threading.Thread(target=scheduler.run)
    thread.start()
    try:
        assert ran.wait(10)
    finally:
        scheduler.stop()
        thread.join(10)
    assert store.failures == 0


def test_an_error_that_ends_a_loop_is_raised_by_run() -> None:
    store = FlakyClockStore(1, RuntimeError("a bug"))
    scheduler = Scheduler(Guard(store), [Job("bug", lambda context: None, Every(1))])
    with pytest.raises(RuntimeError, match="a bug"):
        scheduler.run()


def test_two_schedulers_catching_up_run_each_missed_slot_once() -> None:
    store = MemoryStore()
    ran: Counter[str] = Counter()
    lock = threading.Lock()

    def tick(context: JobContext) -> None:
        with lock:
            ran[context.key] += 1

    job = Job("catch", tick, Every(1), missed=Missed.ALL, catch_up=3)
    started = Every(1).slot_at(store.now())
    schedulers = [Scheduler(Guard(store), [job]) for _ in range(2)]
    run_for(1.0, schedulers, [threading.Thread(target=s.run) for s in schedulers])
    missed = [slot_key(started - n) for n in (3, 2, 1)]
    assert all(ran[key] == 1 for key in missed), ran
    assert set(ran.values()) == {1}, ran
