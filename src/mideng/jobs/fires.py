"""What a host scheduler's trigger means to mideng, written once for every scheduler that
fires a job's slots (APScheduler 3 and 4): when the trigger fires, and what one fire runs.

The trigger fires at the job's slot starts by the host's clock (``fire_after``); a fire then
runs the slot it means by the store's clock (``slots.nearest``), so hosts whose clocks
disagree run the same slot; a slot found held elsewhere is looked at again when that
holder's lease ends (``fire`` answers when), to take it over if the holder died.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from mideng.core import effects
from mideng.core.effects import Effects
from mideng.guard.driver import Driver
from mideng.jobs.job import Job
from mideng.jobs.schedule import Schedule
from mideng.jobs.slots import Outcome, SlotRun, arun_slot, nearest, run_slot

#: How long after a holder's lease ends a slot is looked at again: the lease is over by
#: the store's clock by then, not merely by the host's.
LOOK_AGAIN_MARGIN = 0.05


def fire_after(schedule: Schedule, previous: float | None, now: float) -> float:
    """When a trigger fires next (seconds): the slot after its ``previous`` fire, or, for
    its first fire, the slot starting at ``now`` or else the next one (never a slot that
    has started already: that one belongs to the fire that came before this host)."""
    if previous is not None:
        return schedule.after(previous)
    current = schedule.slot_at(now)
    return current if current == now else schedule.after(current)


def fire(
    guard: Driver, job: Job, slot: float | None, tolerance: float
) -> Effects[tuple[SlotRun, datetime | None]]:
    """One fire of a trigger (``slot`` None: the slot it means by the store's clock), or a
    look at a held slot again (``slot``): the slot's run, and when (by the host's clock) to
    look at it again if it was held elsewhere, else None."""
    if slot is None:
        slot = yield from nearest(guard.store, job, tolerance)
    ran = yield effects.call(run_slot, arun_slot, guard, job, slot)
    if ran.outcome is not Outcome.RUNNING:
        return ran, None
    now = yield effects.call(guard.store.now, guard.store.anow)
    until = ran.lease_until if ran.lease_until is not None else ran.slot + job.lease
    wait = max(until - now, 0.0) + LOOK_AGAIN_MARGIN
    return ran, datetime.now(timezone.utc) + timedelta(seconds=wait)
