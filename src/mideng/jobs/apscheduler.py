"""APScheduler 3 fires a job's times on each host; mideng runs each slot once across them.

``add_job(scheduler, guard, job)`` adds ``job`` to an APScheduler 3 scheduler (any of them:
``BackgroundScheduler``, ``BlockingScheduler``, ``AsyncIOScheduler`` with ``use_async=True``)
with a trigger that fires at the job's slot starts (``SlotTrigger``: mideng's own schedule,
so cron expressions keep crontab's weekday numbers and day rule, and mideng's rule across
clock changes). Each fire runs the slot it means by the store's clock (``slots.nearest``), so
every host may run the same scheduler with the same jobs. APScheduler 4 is not wrapped.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from mideng.core import effects
from mideng.core.effects import Effects
from mideng.errors import ConfigurationError
from mideng.guard.driver import Driver
from mideng.jobs.job import Job
from mideng.jobs.schedule import Schedule
from mideng.jobs.slots import Outcome, SlotRun, arun_slot, nearest, run_slot

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
        if previous_fire_time is not None:
            upcoming = self.schedule.after(previous_fire_time.timestamp())
        else:  # the first fire: the slot starting now, or the next one
            moment = now.timestamp()
            current = self.schedule.slot_at(moment)
            upcoming = current if current == moment else self.schedule.after(current)
        return datetime.fromtimestamp(upcoming, timezone.utc)

    def __str__(self) -> str:
        return f"mideng slots ({self.schedule.describe()})"


def held_again(
    scheduler: Any, guard: Driver, job: Job, ran: SlotRun, now: float, use_async: bool
) -> None:
    """A slot found held elsewhere is looked at again when that holder's lease ends (a
    one-off APScheduler job), to take it over if the holder died."""
    if ran.outcome is not Outcome.RUNNING:
        return
    until = ran.lease_until if ran.lease_until is not None else ran.slot + job.lease
    at = datetime.now(timezone.utc) + timedelta(seconds=max(until - now, 0.0) + 0.05)
    scheduler.add_job(
        _arun if use_async else _run,
        "date",
        run_date=at,
        args=(scheduler, guard, job, ran.slot),
        misfire_grace_time=None,
    )


def _fired(
    scheduler: Any, guard: Driver, job: Job, slot: float | None, tolerance: float, use_async: bool
) -> Effects[None]:
    """One fire of the trigger (``slot`` None: the slot it means by the store's clock), or a
    look at a held slot again (``slot``)."""
    if slot is None:
        slot = yield from nearest(guard.store, job, tolerance)
    ran = yield effects.call(run_slot, arun_slot, guard, job, slot)
    now = yield effects.call(guard.store.now, guard.store.anow)
    held_again(scheduler, guard, job, ran, now, use_async)


def _run(
    scheduler: Any, guard: Driver, job: Job, slot: float | None, tolerance: float = 5.0
) -> None:
    effects.run(_fired(scheduler, guard, job, slot, tolerance, use_async=False))


async def _arun(
    scheduler: Any, guard: Driver, job: Job, slot: float | None, tolerance: float = 5.0
) -> None:
    await effects.arun(_fired(scheduler, guard, job, slot, tolerance, use_async=True))


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
    slot found held elsewhere is looked at again when that lease ends (``held_again``)."""
    options.setdefault("id", job.name)
    options.setdefault("misfire_grace_time", max(1, int(tolerance)))
    runner = _arun if use_async else _run
    trigger = SlotTrigger(job.schedule)
    return scheduler.add_job(
        runner, trigger, args=(scheduler, guard, job, None, tolerance), **options
    )
