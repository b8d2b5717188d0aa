"""The scheduler: one loop per job, written once as a procedure of effects (mideng.core.effects)
and carried out with threads (``Scheduler.run``) or on an event loop (``Scheduler.arun``).

Each pass reads the store's clock, works out the slots due since the last pass (by the job's
missed policy), runs each that the overlap policy lets start, looks again at slots another
holder had when their lease ends (a dead holder's slot is taken over), and sleeps until the
next slot starts by the store's clock. The host's clock only measures how long to sleep, so
hosts whose clocks disagree by seconds still start each slot together, and the claim decides
which of them runs it. ``stop()`` (SIGTERM in ``mideng jobs run``) lets a running job end, then
every loop returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from mideng.core import effects
from mideng.core.effects import Effect, Effects
from mideng.errors import ConfigurationError, IdempotencyError
from mideng.guard.driver import Driver
from mideng.jobs.job import Job, Missed, Overlap
from mideng.jobs.slots import Outcome, SlotRun, arun_slot, previous_clear, report, run_slot
from mideng.observability.logs import jobs as job_logs

#: At most this many missed slots are looked at in one pass (older ones are left).
MOST_MISSED = 1000
#: A sleeping loop wakes at least this often to read the store's clock again.
LONGEST_SLEEP = 60.0
#: After the store failed a pass, wait this long before the next.
AFTER_FAILURE = 1.0


@dataclass
class Due:
    """The slots a pass runs, in order, and those the missed policy leaves."""

    run: list[float] = field(default_factory=list)
    skipped: list[float] = field(default_factory=list)


def first_last(job: Job, now: float) -> float:
    """A starting scheduler's "last slot handled": so that the current slot and ``catch_up``
    slots before it are due."""
    last = job.schedule.slot_at(now)
    for _ in range(job.catch_up + 1):
        last = job.schedule.slot_at(last - 0.5)
    return last


def due(job: Job, last: float, now: float) -> Due:
    """The slots after ``last`` that have started by ``now``, by the job's missed policy."""
    current = job.schedule.slot_at(now)
    if current <= last:
        return Due()
    missed: list[float] = []
    slot = job.schedule.after(last)
    while slot < current:
        missed.append(slot)
        slot = job.schedule.after(slot)
        if len(missed) > MOST_MISSED:
            missed.pop(0)
    if job.missed is Missed.ALL:
        return Due([*missed, current])
    if job.missed is Missed.SKIP and now - current > job.grace:
        return Due([], [*missed, current])
    return Due([current], missed)


class Scheduler:
    """Runs ``jobs`` on ``guard``'s store until ``stop()``.

    ``host_clock``: the clock the loops measure their sleeps with (seconds; any origin). The
    store's clock says when a slot starts; this one only how much time passed since it was
    read, so a host clock set seconds off changes nothing."""

    def __init__(
        self,
        guard: Driver,
        jobs: Iterable[Job],
        *,
        host_clock: Callable[[], float] | None = None,
    ) -> None:
        self.guard = guard
        self.jobs = list(jobs)
        if not self.jobs:
            raise ConfigurationError("a scheduler needs at least one job")
        names = [job.name for job in self.jobs]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"two jobs with one name among {names}")
        self.host_clock = host_clock or time.monotonic
        self._stop = threading.Event()
        self._astop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._beside: list[threading.Thread] = []
        self._abeside: set[asyncio.Task[SlotRun]] = set()
        self._failed: list[BaseException] = []  # what ended a loop other than stop()

    # -- stopping -------------------------------------------------------------------------------
    def stop(self) -> None:
        """Let the running jobs end, then return from ``run`` / ``arun``. From any thread or a
        signal handler."""
        self._stop.set()
        loop, astop = self._loop, self._astop
        if loop is not None and astop is not None:
            loop.call_soon_threadsafe(astop.set)

    def stopping(self) -> bool:
        return self._stop.is_set()

    def _sleep(self, seconds: float) -> None:
        deadline = self.host_clock() + seconds
        while not self._stop.is_set():
            left = deadline - self.host_clock()
            if left <= 0:
                return
            self._stop.wait(left)

    async def _asleep(self, seconds: float) -> None:
        assert self._astop is not None
        deadline = self.host_clock() + seconds
        while not self._astop.is_set():
            left = deadline - self.host_clock()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._astop.wait(), left)

    def sleep(self, seconds: float) -> Effect[None]:
        return effects.call(self._sleep, self._asleep, seconds)

    # -- running one slot beside the loop (overlap="beside") ----------------------------------
    def _launch(self, job: Job, slot: float) -> None:
        thread = threading.Thread(
            target=run_slot, args=(self.guard, job, slot), name=f"mideng-job-{job.name}"
        )
        self._beside = [t for t in self._beside if t.is_alive()]
        self._beside.append(thread)
        thread.start()

    async def _alaunch(self, job: Job, slot: float) -> None:
        task = asyncio.get_running_loop().create_task(arun_slot(self.guard, job, slot))
        self._abeside.add(task)
        task.add_done_callback(self._abeside.discard)

    # -- the loop of one job, written once ---------------------------------------------------
    def job_loop(self, job: Job) -> Effects[None]:
        store = self.guard.store
        last: float | None = None  # the latest slot this loop dealt with
        held: dict[float, float] = {}  # slots another holder had -> when its lease ends
        while not self.stopping():
            try:
                now = yield effects.call(store.now, store.anow)
                if last is None:
                    last = first_last(job, now)
                todo = due(job, last, now)
                for slot in todo.skipped:
                    report(SlotRun(job.name, slot, Outcome.SKIPPED), job.scope)
                retry = sorted(s for s, until in held.items() if until <= now)
                for slot in [*retry, *todo.run]:
                    if self.stopping():
                        break
                    held.pop(slot, None)
                    yield from self._one(job, slot, held)
                    last = max(last, slot)
                now = yield effects.call(store.now, store.anow)
                read_at = self.host_clock()
            except IdempotencyError as exc:  # the store down: read its clock again soon
                job_logs.loop_failed(job.name, exc)
                yield self.sleep(AFTER_FAILURE)
                continue
            wake = min([job.schedule.after(last), *held.values()])
            wait = wake - now - (self.host_clock() - read_at)
            if wait > 0:
                yield self.sleep(min(wait, LONGEST_SLEEP))

    def _one(self, job: Job, slot: float, held: dict[float, float]) -> Effects[None]:
        clear = yield from previous_clear(self.guard.store, job, slot, self.stopping)
        if not clear:
            if not self.stopping():
                report(SlotRun(job.name, slot, Outcome.SKIPPED), job.scope)
            return
        if job.overlap is Overlap.BESIDE:
            yield effects.call(self._launch, self._alaunch, job, slot)
            return
        ran: SlotRun = yield effects.call(run_slot, arun_slot, self.guard, job, slot)
        if ran.outcome is Outcome.RUNNING:
            held[slot] = ran.lease_until if ran.lease_until is not None else slot + job.lease

    # -- the two ways to carry the loops out ---------------------------------------------------
    def run(self) -> None:
        """Run every job's loop, each on its own thread, until ``stop()``."""
        threads = [
            threading.Thread(
                target=self._run_loop, args=(job,), name=f"mideng-jobs-{job.name}", daemon=True
            )
            for job in self.jobs
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for thread in self._beside:
            thread.join()
        if self._failed:
            raise self._failed[0]

    def _run_loop(self, job: Job) -> None:
        try:
            effects.run(self.job_loop(job))
        except BaseException as exc:  # run() raises it once every loop ended
            job_logs.loop_failed(job.name, exc)
            self._failed.append(exc)
            self.stop()

    async def arun(self) -> None:
        """Run every job's loop as a task on the running event loop, until ``stop()``."""
        self._loop = asyncio.get_running_loop()
        self._astop = asyncio.Event()
        if self._stop.is_set():
            self._astop.set()
        loops: list[Any] = [effects.arun(self.job_loop(job)) for job in self.jobs]
        try:
            await asyncio.gather(*loops)
        finally:
            if self._abeside:
                await asyncio.gather(*self._abeside, return_exceptions=True)
