"""Celery beat sends a job's task at each slot; mideng runs each slot once, however many
beats sent it.

``slot_task(app, guard, job)`` registers a Celery task for ``job`` and its beat entry. The
entry's schedule (``SlotSchedule``) is due at the job's slot starts; when a beat sends the
task, the slot it means by the store's clock (``slots.nearest_slot``) is written into the
message's keyword arguments (Celery's ``before_task_publish`` signal), so two beats that both
send it, or a publish that is retried, give a worker two messages for one slot, and the
slot's claim lets one of them run the job (``slots.run_slot``). A message that finds its
slot held elsewhere is retried when that holder's lease ends, so a worker that died mid-run
has its slot taken over (or left UNKNOWN, for a job with external effects). A message sent
without a slot (``task.delay()`` by hand) runs the slot nearest the store's clock when it
runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from mideng.core import effects
from mideng.errors import ConfigurationError
from mideng.guard.driver import Driver
from mideng.jobs.job import Job
from mideng.jobs.schedule import Schedule
from mideng.jobs.slots import Outcome, nearest, nearest_slot, run_slot

try:
    from celery.schedules import BaseSchedule, schedstate  # type: ignore[import-untyped]
    from celery.signals import before_task_publish  # type: ignore[import-untyped]
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ConfigurationError(
        "mideng.jobs.celery needs Celery: pip install 'mideng[celery]'"
    ) from exc

#: The keyword argument the slot travels in.
SLOT = "mideng_slot"
#: Task name -> (guard, job, tolerance) of every slot task in this process: what a sending
#: beat stamps.
_STAMPED: dict[str, tuple[Driver, Job, float]] = {}


class SlotSchedule(BaseSchedule):  # type: ignore[misc]
    """A beat schedule due at a mideng schedule's slot starts (by the beat's clock)."""

    def __init__(self, slots: Schedule, nowfun: Any = None, app: Any = None) -> None:
        super().__init__(nowfun=nowfun, app=app)
        self.slots = slots

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.slots, self.nowfun))

    def remaining_estimate(self, last_run_at: datetime) -> timedelta:
        upcoming = self.slots.after(self.slots.slot_at(self._seconds(last_run_at)))
        return timedelta(seconds=max(0.0, upcoming - self.now().timestamp()))

    def is_due(self, last_run_at: datetime) -> Any:
        now = self.now().timestamp()
        current = self.slots.slot_at(now)
        due = self._seconds(last_run_at) < current
        return schedstate(due, max(self.slots.after(current) - now, 0.01))

    def _seconds(self, moment: datetime) -> float:
        return float(self.maybe_make_aware(moment).timestamp())

    def __repr__(self) -> str:
        return f"<mideng slots: {self.slots.describe()}>"


def _stamp(sender: str | None = None, body: Any = None, **_: Any) -> None:
    found = _STAMPED.get(sender or "")
    if found is None or not isinstance(body, tuple) or len(body) < 2:
        return
    guard, job, tolerance = found
    kwargs = body[1]
    if isinstance(kwargs, dict) and kwargs.get(SLOT) is None:
        kwargs[SLOT] = nearest_slot(job.schedule, guard.store.now(), tolerance)


before_task_publish.connect(_stamp, weak=False)


def slot_task(
    app: Any, guard: Driver, job: Job, *, tolerance: float = 5.0, **task_options: Any
) -> Any:
    """Register ``job`` on ``app`` as the task ``mideng.jobs.<name>`` and its beat entry
    (``app.conf.beat_schedule[<name>]``). ``task_options`` go to ``app.task`` (``queue``,
    ``acks_late`` ...). The task returns the slot's outcome (``ran``, ``done``, ``unknown``
    ...)."""
    name = f"mideng.jobs.{job.name}"

    def run_job_slot(self: Any, **kwargs: Any) -> str:
        slot = kwargs.get(SLOT)
        if slot is None:
            slot = effects.run(nearest(guard.store, job, tolerance))
            kwargs[SLOT] = slot
        ran = run_slot(guard, job, float(slot))
        if ran.outcome is Outcome.RUNNING:
            # Held elsewhere: look again when that lease ends, to take the slot over if its
            # holder died (the holder's heartbeat keeps a live one's lease ahead of this).
            until = ran.lease_until if ran.lease_until is not None else slot + job.lease
            wait = max(until - guard.store.now(), 0.0) + 0.05
            raise self.retry(kwargs=kwargs, countdown=wait, max_retries=None)
        return str(ran.outcome.value)

    task = app.task(name=name, bind=True, **task_options)(run_job_slot)
    _STAMPED[name] = (guard, job, tolerance)
    entry: dict[str, Any] = {"task": name, "schedule": SlotSchedule(job.schedule, app=app)}
    if "queue" in task_options:
        entry["options"] = {"queue": task_options["queue"]}
    app.conf.beat_schedule = {**(app.conf.beat_schedule or {}), job.name: entry}
    return task
