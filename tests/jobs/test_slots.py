"""One slot through the Guard: run once, done elsewhere, held elsewhere then taken over after
the lease (fence 2), UNKNOWN for a job with external effects, a failure kept; sync and async;
and what the metrics observer is told."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest

from mideng import Guard
from mideng.core.record import ClaimRequest, ExpiryPolicy
from mideng.jobs import Every, Job, JobContext, Outcome, arun_slot, run_slot, slot_key
from mideng.observability import observers
from mideng.stores.memory import MemoryStore

SLOT = 1_796_000_000.0  # 2026-11-29T...: a slot of Every(10)


class Clock:
    def __init__(self) -> None:
        self.now = SLOT + 1.0

    def __call__(self) -> float:
        return self.now


class Runs:
    def __init__(self) -> None:
        self.seen: list[JobContext] = []
        self._lock = threading.Lock()

    def __call__(self, context: JobContext) -> str:
        with self._lock:
            self.seen.append(context)
        return "ok"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def guard(clock: Clock) -> Guard:
    return Guard(MemoryStore(clock))


def job_of(fn: Any, **options: Any) -> Job:
    return Job(f"j{uuid.uuid4().hex[:8]}", fn, Every(10), **options)


def hold(guard: Guard, job: Job, lease: float, on_expiry: ExpiryPolicy) -> None:
    """Another scheduler's claim on the slot, that never ends: it died."""
    req = ClaimRequest(job.scope, slot_key(SLOT), "elsewhere", lease, 600.0, None, on_expiry)
    assert guard.store.claim(req).acquired


def run(mode: str, guard: Guard, job: Job) -> Any:
    if mode == "sync":
        return run_slot(guard, job, SLOT)
    return asyncio.run(arun_slot(guard, job, SLOT))


MODES = ["sync", "async"]


@pytest.mark.parametrize("mode", MODES)
def test_a_slot_runs_once_and_is_then_done(guard: Guard, mode: str) -> None:
    runs = Runs()
    job = job_of(runs)
    first = run(mode, guard, job)
    assert (first.outcome, first.fence, first.took_over) == (Outcome.RAN, 1, False)
    assert first.seconds is not None
    [context] = runs.seen
    assert context.job == job.name
    assert context.key == slot_key(SLOT) == first.key
    assert context.slot == context.scheduled == datetime.fromtimestamp(SLOT, timezone.utc)
    assert (context.fence, context.took_over) == (1, False)
    again = run(mode, guard, job)
    assert again.outcome is Outcome.DONE
    assert len(runs.seen) == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_held_slot_is_left_then_taken_over_when_the_lease_ends(
    guard: Guard, clock: Clock, mode: str
) -> None:
    runs = Runs()
    job = job_of(runs)
    hold(guard, job, 30.0, ExpiryPolicy.TAKE_OVER)
    held = run(mode, guard, job)
    assert held.outcome is Outcome.RUNNING
    assert held.lease_until == pytest.approx(clock.now + 30.0)
    assert runs.seen == []
    clock.now += 31.0
    taken = run(mode, guard, job)
    assert (taken.outcome, taken.fence, taken.took_over) == (Outcome.RAN, 2, True)
    assert (runs.seen[0].fence, runs.seen[0].took_over) == (2, True)


@pytest.mark.parametrize("mode", MODES)
def test_a_dead_holder_of_a_job_with_external_effects_leaves_the_slot_unknown(
    guard: Guard, clock: Clock, mode: str
) -> None:
    runs = Runs()
    job = job_of(runs, external_effects=True)
    hold(guard, job, 30.0, ExpiryPolicy.UNKNOWN)
    clock.now += 31.0
    assert run(mode, guard, job).outcome is Outcome.UNKNOWN
    assert run(mode, guard, job).outcome is Outcome.UNKNOWN
    assert runs.seen == []


class Broken(Exception):
    pass


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_run_is_kept_and_the_slot_not_run_again(guard: Guard, mode: str) -> None:
    calls: list[int] = []

    def failing(context: JobContext) -> None:
        calls.append(context.fence)
        raise Broken("disk full")

    job = job_of(failing)
    failed = run(mode, guard, job)
    assert failed.outcome is Outcome.FAILED
    assert isinstance(failed.error, Broken)
    assert run(mode, guard, job).outcome is Outcome.DONE
    assert calls == [1]


def test_an_async_job_is_awaited(guard: Guard) -> None:
    seen: list[int] = []

    async def job_fn(context: JobContext) -> None:
        await asyncio.sleep(0)
        seen.append(context.fence)

    assert asyncio.run(arun_slot(guard, job_of(job_fn), SLOT)).outcome is Outcome.RAN
    assert seen == [1]


def test_the_metrics_observer_is_told_each_slot(guard: Guard, clock: Clock) -> None:
    from mideng.observability.metrics import COUNTERS, HISTOGRAMS
    from mideng.observability.recorder import Recorder

    recorder = Recorder((*COUNTERS, *HISTOGRAMS))
    job = job_of(Runs())
    hold(guard, job, 30.0, ExpiryPolicy.TAKE_OVER)
    observers.install(metrics=recorder)
    try:
        run_slot(guard, job, SLOT)
        clock.now += 31.0
        run_slot(guard, job, SLOT)
        run_slot(guard, job, SLOT)
    finally:
        observers.install(metrics=None)
    series = recorder.snapshot()
    counts = {labels: one.count for labels, one in series["mideng_job_slots"].items()}
    assert counts == {(job.name, "running"): 1, (job.name, "ran"): 1, (job.name, "done"): 1}
    assert series["mideng_job_takeovers"][(job.name,)].count == 1
    assert series["mideng_job_seconds"][(job.name,)].count == 1


@pytest.mark.parametrize("mode", MODES)
def test_the_heartbeat_keeps_the_slot_while_a_long_run_outlives_its_lease(
    tmp_path: Any, mode: str
) -> None:
    """A run three times as long as its lease keeps the slot: a scheduler looking at it past
    the first lease finds it held (running), never takes it over."""
    from mideng.stores.sqlite import SQLiteStore

    path = str(tmp_path / "beat.db")
    started, release = threading.Event(), threading.Event()
    fences: list[int] = []

    def long_job(context: JobContext) -> None:
        fences.append(context.fence)
        started.set()
        assert release.wait(10)

    job = job_of(long_job, lease=0.6)
    holder = Guard(SQLiteStore(path))
    runner = threading.Thread(target=run, args=(mode, holder, job))
    runner.start()
    try:
        assert started.wait(5)
        other = Guard(SQLiteStore(path))
        for _ in range(4):  # 2 s: more than three leases
            time.sleep(0.5)
            assert run_slot(other, job, SLOT).outcome is Outcome.RUNNING
    finally:
        release.set()
        runner.join(10)
    assert run_slot(other, job, SLOT).outcome is Outcome.DONE
    assert fences == [1]
    holder.close()
    other.close()
