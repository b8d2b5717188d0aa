"""APScheduler 4 fires a job's times on each host; mideng runs each slot once across them.

``add_job(scheduler, guard, job)`` (a ``Scheduler``) and ``await aadd_job(scheduler, guard,
job)`` (an ``AsyncScheduler``) add a task for ``job`` (id ``mideng.jobs:<name>``) and a
schedule (id: the job's name) whose trigger fires at the job's slot starts (``SlotTrigger``:
mideng's own schedule, as under APScheduler 3). Each fire runs the slot it means by the
store's clock (``fires.fire``), so every host may run its own scheduler, with its own data
store or a shared one, with the same jobs. A slot found held elsewhere is looked at again
when that lease ends: a one-off schedule of the same task, for that slot.

The task's function is kept in the scheduler's process (it holds the guard and the job), so
each host adds its jobs when it starts, as with APScheduler 3; what a persistent data store
keeps (the trigger and the held slot's time) pickles.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from mideng.core import effects
from mideng.errors import ConfigurationError
from mideng.guard.driver import Driver
from mideng.jobs.fires import fire, fire_after
from mideng.jobs.job import Job
from mideng.jobs.schedule import Schedule, slot_time
from mideng.jobs.slots import SlotRun

try:
    from apscheduler import AsyncScheduler, ConflictPolicy, Scheduler
    from apscheduler.abc import Trigger
    from apscheduler.triggers.date import DateTrigger
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ConfigurationError(
        "mideng.jobs.apscheduler4 needs APScheduler 4: pip install 'mideng[apscheduler4]'"
    ) from exc

#: The version of what ``SlotTrigger.__getstate__`` answers.
STATE_VERSION = 1


class SlotTrigger(Trigger):  # type: ignore[misc]
    """An APScheduler 4 trigger firing at a mideng schedule's slot starts (by the host's
    clock; the fire itself reads the store's). Its first fire is the slot starting when
    APScheduler first asks, or the next one."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.previous: float | None = None

    def next(self) -> datetime:
        self.previous = fire_after(self.schedule, self.previous, time.time())
        return slot_time(self.previous)

    def __getstate__(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "schedule": self.schedule, "previous": self.previous}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ConfigurationError(
                f"a stored mideng SlotTrigger of version {state.get('version')!r}; "
                f"this mideng reads version {STATE_VERSION}"
            )
        self.schedule = state["schedule"]
        self.previous = state["previous"]

    def __repr__(self) -> str:
        return f"SlotTrigger({self.schedule.describe()})"


def task_id(job: Job) -> str:
    """The APScheduler task of ``job``'s fires and looks again."""
    return f"mideng.jobs:{job.name}"


def slot_schedule(job: Job, tolerance: float, options: dict[str, Any]) -> dict[str, Any]:
    """The ``add_schedule`` arguments of ``job``'s slots: ``options`` over mideng's."""
    return {
        "id": job.name,
        "misfire_grace_time": tolerance,
        "conflict_policy": ConflictPolicy.replace,
        **options,
    }


def look_again(job: Job, ran: SlotRun, at: datetime) -> dict[str, Any]:
    """The ``add_schedule`` arguments of a look at a held slot again, ``at`` the end of its
    holder's lease: one fire, of that slot, however late (the slot is still owed)."""
    return {
        "trigger": DateTrigger(at),
        "id": f"{job.name} {ran.key}",
        "args": (ran.slot,),
        "misfire_grace_time": None,
        "conflict_policy": ConflictPolicy.replace,
    }


def add_job(
    scheduler: Scheduler, guard: Driver, job: Job, *, tolerance: float = 5.0, **options: Any
) -> str:
    """Add ``job`` to an APScheduler 4 ``Scheduler``: its task and its slots' schedule;
    ``options`` go to ``add_schedule`` (``misfire_grace_time``, ``job_executor`` ...). The
    job runs in the scheduler's thread pool. Answers the schedule's id."""
    task = task_id(job)

    def run(slot: float | None = None) -> None:
        ran, at = effects.run(fire(guard, job, slot, tolerance))
        if at is not None:
            scheduler.add_schedule(task, **look_again(job, ran, at))

    # Which slot runs is the store's decision, so the task's jobs never wait behind each
    # other on a host (a look again beside the next slot's fire).
    scheduler.configure_task(task, func=run, max_running_jobs=None)
    trigger = SlotTrigger(job.schedule)
    schedule_id: str = scheduler.add_schedule(
        task, trigger, **slot_schedule(job, tolerance, options)
    )
    return schedule_id


async def aadd_job(
    scheduler: AsyncScheduler, guard: Driver, job: Job, *, tolerance: float = 5.0, **options: Any
) -> str:
    """``add_job`` for an ``AsyncScheduler`` (inside ``async with scheduler``): the fires
    run on its event loop, a ``def`` job in a worker thread."""
    task = task_id(job)

    async def run(slot: float | None = None) -> None:
        ran, at = await effects.arun(fire(guard, job, slot, tolerance))
        if at is not None:
            await scheduler.add_schedule(task, **look_again(job, ran, at))

    await scheduler.configure_task(task, func=run, max_running_jobs=None)
    trigger = SlotTrigger(job.schedule)
    schedule_id: str = await scheduler.add_schedule(
        task, trigger, **slot_schedule(job, tolerance, options)
    )
    return schedule_id
