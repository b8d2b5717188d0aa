"""APScheduler 3 fires a job's times on each host; mideng runs each slot once across them.

``add_job(scheduler, guard, job)`` adds ``job`` to an APScheduler 3 scheduler (any of them:
``BackgroundScheduler``, ``BlockingScheduler``, ``AsyncIOScheduler`` with ``use_async=True``)
with a trigger that fires at the job's slot starts (``SlotTrigger``: mideng's own schedule,
so cron expressions keep crontab's weekday numbers and day rule, and mideng's rule across
clock changes). Each fire runs the slot it means by the store's clock (``fires.fire``), so
every host may run the same scheduler with the same jobs. APScheduler 4 has its own module,
``mideng.jobs.apscheduler4``.
"""

from __future__ import annotations

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
    from apscheduler.triggers.base import BaseTrigger
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ConfigurationError(
        "mideng.jobs.apscheduler needs APScheduler 3: pip install 'mideng[apscheduler]'"
    ) from exc


class SlotTrigger(BaseTrigger):  # type: ignore[misc]
    """An APScheduler 3 trigger firing at a mideng schedule's slot starts (by the host's
    clock; the fire itself reads the store's)."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime:
        previous = None if previous_fire_time is None else previous_fire_time.timestamp()
        return slot_time(fire_after(self.schedule, previous, now.timestamp()))

    def __str__(self) -> str:
        return f"mideng slots ({self.schedule.describe()})"


def look_again(
    scheduler: Any, guard: Driver, job: Job, ran: SlotRun, at: datetime | None, use_async: bool
) -> None:
    """A slot found held elsewhere is looked at again ``at`` the end of that holder's lease
    (a one-off APScheduler job), to take it over if the holder died."""
    if at is None:
        return
    scheduler.add_job(
        _arun if use_async else _run,
        "date",
        run_date=at,
        args=(scheduler, guard, job, ran.slot),
        misfire_grace_time=None,
    )


def _run(
    scheduler: Any, guard: Driver, job: Job, slot: float | None, tolerance: float = 5.0
) -> None:
    ran, at = effects.run(fire(guard, job, slot, tolerance))
    look_again(scheduler, guard, job, ran, at, use_async=False)


async def _arun(
    scheduler: Any, guard: Driver, job: Job, slot: float | None, tolerance: float = 5.0
) -> None:
    ran, at = await effects.arun(fire(guard, job, slot, tolerance))
    look_again(scheduler, guard, job, ran, at, use_async=True)


def add_job(
    scheduler: Any,
    guard: Driver,
    job: Job,
    *,
    use_async: bool = False,
    tolerance: float = 5.0,
    **options: Any,
) -> Any:
    """Add ``job`` to an APScheduler 3 ``scheduler``; ``options`` go to its ``add_job``
    (``misfire_grace_time``, ``executor`` ...). The APScheduler job's id is the job's name;
    ``use_async``: the scheduler is an ``AsyncIOScheduler`` and the job an ``async def``. A
    slot found held elsewhere is looked at again when that lease ends (``look_again``)."""
    options.setdefault("id", job.name)
    options.setdefault("misfire_grace_time", max(1, int(tolerance)))
    runner = _arun if use_async else _run
    trigger = SlotTrigger(job.schedule)
    return scheduler.add_job(
        runner, trigger, args=(scheduler, guard, job, None, tolerance), **options
    )
