"""A scheduled job: its name, when its slots start, what it runs, and its policies.

``Jobs`` is a registry a service fills with ``@jobs.job(...)`` and hands to a scheduler
(``mideng jobs run module:jobs``). A job's runs are guarded calls on scope ``job:<name>``,
keyed by the slot (mideng.jobs.slots), so any number of schedulers run each slot at most once.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from mideng.core.keys import check_scope
from mideng.errors import ConfigurationError
from mideng.jobs.schedule import Cron, Schedule, every

SCOPE_PREFIX = "job:"


class Missed(str, enum.Enum):
    """What a scheduler does with slots that started while no scheduler ran them (all were
    down, or busy): run only the latest of them, every one in order, or none (a slot runs
    only while it is the current one)."""

    LATEST = "latest"
    ALL = "all"
    SKIP = "skip"


class Overlap(str, enum.Enum):
    """What a slot does when the job's previous slot is still running (here or on another
    host): wait for it to end, be skipped, or run beside it."""

    WAIT = "wait"
    SKIP = "skip"
    BESIDE = "beside"


@dataclass(frozen=True)
class JobContext:
    """What a run of a job is handed: which slot it runs and under which fence.

    ``fence`` grows each time a slot is taken over from a holder whose lease ran out; pass
    it to the job's writes (``mideng.state.update_fenced(..., fence=context.fence)``) so a
    paused holder's late write is refused by the table itself."""

    job: str
    slot: datetime  # the slot's start, UTC
    key: str  # the slot's record key
    fence: int
    scheduled: datetime  # the same instant: when the run was due
    took_over: bool  # this run took the slot over from a holder that never finished


@dataclass(frozen=True)
class Job:
    """One job. ``fn(context)`` runs once per slot; a ``def`` or an ``async def``.

    ``lease``: seconds a run holds its slot without a heartbeat (renewed while it runs).
    ``external_effects``: a holder that dies leaves its slot UNKNOWN (an operator resolves
    it, ``mideng resolve``) instead of the next scheduler running it again.
    ``catch_up``: how far back a starting scheduler looks for missed slots (``missed="all"``
    or ``"latest"``), as a number of slots; ``grace``: how late, in seconds, a slot may still
    start under ``missed="skip"``."""

    name: str
    fn: Callable[[JobContext], Any]
    schedule: Schedule
    missed: Missed = Missed.LATEST
    overlap: Overlap = Overlap.WAIT
    external_effects: bool = False
    lease: float = 60.0
    catch_up: int = 0
    grace: float = 5.0
    #: Seconds a slot's record is kept: a scheduler that looks at the slot later than this
    #: (a catch-up further back, a scheduler down longer) finds no record and may run it
    #: again, so keep it longer than the look-back and any outage you ride out.
    keep: float = 86400.0

    def __post_init__(self) -> None:
        check_scope(self.scope)
        if not callable(self.fn):
            raise ConfigurationError(f"job {self.name!r}: fn must be callable")
        for name, kind in (("missed", Missed), ("overlap", Overlap)):
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, kind(value))
            except ValueError:
                allowed = ", ".join(member.value for member in kind)
                raise ConfigurationError(
                    f"job {self.name!r}: {name} must be one of {allowed}, not {value!r}"
                ) from None
        catch_up = self.catch_up
        if isinstance(catch_up, bool) or not isinstance(catch_up, int) or catch_up < 0:
            raise ConfigurationError(f"job {self.name!r}: catch_up must be an int >= 0")
        for name in ("lease", "grace", "keep"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigurationError(f"job {self.name!r}: {name} must be positive seconds")

    @property
    def scope(self) -> str:
        return SCOPE_PREFIX + self.name


def schedule_of(every_: float | timedelta | None, cron: str | None, tz: str | None) -> Schedule:
    """The schedule ``every=`` or ``cron=`` (with ``tz=``) name: exactly one of them."""
    if (every_ is None) == (cron is None):
        raise ConfigurationError("a job needs exactly one of every= and cron=")
    if cron is not None:
        return Cron(cron, tz or "UTC")
    if tz is not None:
        raise ConfigurationError("tz= goes with cron=; every= counts from the epoch in UTC")
    assert every_ is not None
    return every(every_)


class Jobs:
    """A service's jobs, by name: ``@jobs.job("report", cron="0 6 * * *", tz="Asia/Shanghai")``."""

    def __init__(self, *jobs: Job) -> None:
        self._jobs: dict[str, Job] = {}
        for job in jobs:
            self.add(job)

    def add(self, job: Job) -> Job:
        if job.name in self._jobs:
            raise ConfigurationError(f"two jobs named {job.name!r}")
        self._jobs[job.name] = job
        return job

    def job(
        self,
        name: str,
        *,
        every: float | timedelta | None = None,
        cron: str | None = None,
        tz: str | None = None,
        **options: Any,
    ) -> Callable[[Callable[[JobContext], Any]], Callable[[JobContext], Any]]:
        """Register the decorated function as job ``name``; ``options`` are Job's (missed,
        overlap, external_effects, lease, catch_up, grace, keep)."""
        schedule = schedule_of(every, cron, tz)

        def register(fn: Callable[[JobContext], Any]) -> Callable[[JobContext], Any]:
            self.add(Job(name, fn, schedule, **options))
            return fn

        return register

    def __iter__(self) -> Iterator[Job]:
        return iter(self._jobs.values())

    def __len__(self) -> int:
        return len(self._jobs)

    def __getitem__(self, name: str) -> Job:
        try:
            return self._jobs[name]
        except KeyError:
            raise ConfigurationError(f"no job named {name!r}; jobs: {sorted(self._jobs)}") from None
