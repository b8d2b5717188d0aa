"""What an operator sees of a job: its recent slots as the store holds them, and its next.

Written once as a procedure of store calls (mideng.core.effects): ``recent`` carries it out
with blocking calls, ``arecent`` awaits them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mideng.core import effects
from mideng.core.effects import Effects
from mideng.core.record import Record, Status
from mideng.jobs.job import Job
from mideng.jobs.schedule import slot_key
from mideng.stores.base import RecordStore


class SlotState(str, enum.Enum):
    NONE = "none"  # no record: not run (missed, skipped, or its record's retention ran out)
    DONE = "done"
    FAILED = "failed"
    RUNNING = "running"  # held by a live lease
    STUCK = "stuck"  # held, but the lease ran out: the next scheduler takes it over
    UNKNOWN = "unknown"  # an operator resolves it (mideng resolve)


@dataclass(frozen=True)
class SlotView:
    slot: float
    key: str
    state: SlotState
    fence: int | None = None
    age: float | None = None  # seconds since the run started (running, stuck)
    result: bytes | None = None


@dataclass(frozen=True)
class JobView:
    job: Job
    now: float  # the store's clock
    next_slot: float
    slots: list[SlotView]


def _state(record: Record | None, now: float) -> SlotState:
    if record is None:
        return SlotState.NONE
    if record.status is Status.SUCCEEDED:
        return SlotState.DONE
    if record.status is Status.FAILED:
        return SlotState.FAILED
    if record.status is Status.UNKNOWN:
        return SlotState.UNKNOWN
    return SlotState.RUNNING if record.lease_live(now) else SlotState.STUCK


def _view(slot: float, record: Record | None, now: float) -> SlotView:
    state = _state(record, now)
    if record is None:
        return SlotView(slot, slot_key(slot), state)
    held = state in (SlotState.RUNNING, SlotState.STUCK)
    age = now - record.created_at if held else None
    return SlotView(slot, slot_key(slot), state, record.fence, age, record.result)


def viewed(store: RecordStore, job: Job, count: int) -> Effects[JobView]:
    now = yield effects.call(store.now, store.anow)
    slot = job.schedule.slot_at(now)
    slots: list[SlotView] = []
    for _ in range(count):
        record = yield effects.call(store.get, store.aget, job.scope, slot_key(slot))
        slots.append(_view(slot, record, now))
        slot = job.schedule.slot_at(slot - 0.5)
    return JobView(job, now, job.schedule.after(job.schedule.slot_at(now)), slots)


def recent(store: RecordStore, job: Job, count: int = 10) -> JobView:
    """``job``'s latest ``count`` slots (the current one first) and its next slot."""
    return effects.run(viewed(store, job, count))


async def arecent(store: RecordStore, job: Job, count: int = 10) -> JobView:
    return await effects.arun(viewed(store, job, count))
