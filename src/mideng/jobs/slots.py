"""One slot of a job, run at most once across every scheduler: a guarded call on the job's
scope, keyed by the slot.

The claim decides (mideng.core.decide): the first scheduler to claim the slot runs it; one
that finds it done or failed before leaves it (``done``); one that finds it held by a live
lease leaves it for now (``running``) and comes back when that lease ends, to take it over
if its holder died (fence + 1), or to find it UNKNOWN for a job with external effects. The
run gets a ``JobContext`` with the claim's fence for its writes; the Guard's heartbeat keeps
the lease while it runs.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mideng.core import effects
from mideng.core.callables import is_async
from mideng.core.effects import Effects
from mideng.core.flow import Action, Call
from mideng.core.policy import Policy
from mideng.core.record import Claim, ExpiryPolicy, Status
from mideng.core.record import Outcome as ClaimOutcome
from mideng.errors import LeaseLostError
from mideng.guard.driver import Driver
from mideng.guard.pipeline import Terms
from mideng.jobs.job import Job, JobContext, Overlap
from mideng.jobs.schedule import Schedule, slot_key, slot_time
from mideng.observability import observers
from mideng.observability.logs import jobs as job_logs
from mideng.stores.base import RecordStore


class Outcome(str, enum.Enum):
    RAN = "ran"  # this scheduler ran the job for the slot, to its end
    FAILED = "failed"  # it ran here and raised; the failure is kept, the slot not run again
    LOST = "lost"  # it ran here, but its claim was taken over before it ended (a pause)
    DONE = "done"  # run before (here or elsewhere), successfully or not
    RUNNING = "running"  # another holder's lease is live; looked at again when it ends
    UNKNOWN = "unknown"  # a holder of a job with external effects died: an operator decides
    SKIPPED = "skipped"  # left by the missed or overlap policy, not claimed


@dataclass(frozen=True)
class SlotRun:
    """What became of one slot on this scheduler."""

    job: str
    slot: float
    outcome: Outcome
    fence: int | None = None
    seconds: float | None = None
    took_over: bool = False
    #: RUNNING: when the holder's lease ends, on the store's clock (when to look again).
    lease_until: float | None = None
    error: BaseException | None = None

    @property
    def key(self) -> str:
        return slot_key(self.slot)


def policy(guard: Driver, job: Job) -> Policy:
    """The policy of a job's slots: the job's lease and retention; a failure kept, so a
    failed slot is not run again; a duplicate told, not waited for."""
    return guard.policy(
        job.scope,
        lease=job.lease,
        ttl=job.keep,
        on_error="record",
        in_progress="raise",
        on_expiry=ExpiryPolicy.UNKNOWN if job.external_effects else ExpiryPolicy.TAKE_OVER,
        heartbeat=True,
        fail_open=False,
    )


class _Attempt:
    """One attempt at a slot: the call, the claim's answer, and the context once the body
    started."""

    def __init__(self, guard: Driver, job: Job, slot: float) -> None:
        self.job, self.slot = job, slot
        self.call: Call = guard.prepare(job.scope, slot_key(slot), job.fn, None, policy(guard, job))
        self.terms = Terms(next=self.next)
        self.claim: Claim | None = None
        self.context: JobContext | None = None
        self.started = time.monotonic()

    def next(self, call: Call, claim: Claim) -> Action:
        self.claim = claim
        return Call.next(call, claim)

    def begin(self) -> JobContext:
        ticket = self.call.ticket
        at = slot_time(self.slot)
        self.context = JobContext(
            self.job.name, at, ticket.key, ticket.fence, at, took_over=ticket.fence > 1
        )
        return self.context

    def body(self) -> Any:
        return self.job.fn(self.begin())

    async def abody(self) -> Any:
        context = self.begin()
        if is_async(self.job.fn):
            return await self.job.fn(context)
        return await asyncio.to_thread(self.job.fn, context)

    def ended(self, exc: BaseException | None) -> SlotRun:
        """The slot's outcome once the drive returned (``exc`` None) or raised ``exc``; an
        error that is not the slot's answer (the store down) is raised on."""
        name, slot, ran, claim = self.job.name, self.slot, self.context, self.claim
        if ran is not None:
            seconds = time.monotonic() - self.started
            outcome = Outcome.RAN
            if isinstance(exc, LeaseLostError):
                outcome = Outcome.LOST
            elif exc is not None:
                outcome = Outcome.FAILED
            return SlotRun(name, slot, outcome, ran.fence, seconds, ran.took_over, error=exc)
        answer = None if claim is None else claim.outcome
        if answer is ClaimOutcome.REPLAY:  # a result or a kept failure: run before
            return SlotRun(name, slot, Outcome.DONE)
        if answer is ClaimOutcome.IN_PROGRESS and claim is not None:
            return SlotRun(name, slot, Outcome.RUNNING, lease_until=claim.record.lease_until)
        if answer is ClaimOutcome.UNRESOLVED:
            return SlotRun(name, slot, Outcome.UNKNOWN)
        assert exc is not None, "a drive that returned without running replayed a claim"
        raise exc


def report(run: SlotRun, scope: str) -> SlotRun:
    job_logs.slot(scope, run.key, run.outcome.value, run.fence, run.seconds)
    if observers.metrics is not None:
        observers.metrics.job_slot(run.job, run.outcome.value, run.seconds, run.took_over)
    return run


def run_slot(guard: Driver, job: Job, slot: float) -> SlotRun:
    """Claim ``slot`` of ``job`` and run it if it is this scheduler's to run (blocking)."""
    attempt = _Attempt(guard, job, slot)
    try:
        guard.drive(attempt.call, attempt.body, (), {}, attempt.terms)
    except BaseException as exc:
        return report(attempt.ended(exc), job.scope)
    return report(attempt.ended(None), job.scope)


async def arun_slot(guard: Driver, job: Job, slot: float) -> SlotRun:
    """``run_slot`` on the event loop; a ``def`` job runs in a worker thread."""
    attempt = _Attempt(guard, job, slot)
    try:
        await guard.adrive(attempt.call, attempt.abody, (), {}, attempt.terms)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        return report(attempt.ended(exc), job.scope)
    return report(attempt.ended(None), job.scope)


def previous_clear(
    store: RecordStore, job: Job, slot: float, stopping: Callable[[], bool]
) -> Effects[bool]:
    """Whether ``slot`` may start, by the job's overlap policy: the slot before it is not
    held by a live lease anywhere (``wait``: until it is not; ``skip``: False if it is)."""
    if job.overlap is Overlap.BESIDE:
        return True
    previous = slot_key(job.schedule.slot_at(slot - 0.5))
    while not stopping():
        record = yield effects.call(store.get, store.aget, job.scope, previous)
        if record is None or record.status is not Status.PROCESSING:
            return True
        now = yield effects.call(store.now, store.anow)
        if not record.lease_live(now):
            return True  # its holder died: the slot after it need not wait for a take-over
        if job.overlap is Overlap.SKIP:
            return False
        yield effects.pause(min(1.0, record.lease_until - now if record.lease_until else 1.0))
    return False


def nearest_slot(schedule: Schedule, now: float, tolerance: float) -> float:
    """The slot a trigger that fired at ``now`` (the store's clock) means: the slot that
    started last, unless the next one starts within ``tolerance`` seconds (at most half a
    period): a host whose clock runs ahead fires early."""
    slot = schedule.slot_at(now)
    upcoming = schedule.after(slot)
    return upcoming if upcoming - now <= min(tolerance, (upcoming - slot) / 2) else slot


def nearest(store: RecordStore, job: Job, tolerance: float) -> Effects[float]:
    """``nearest_slot`` by the store's clock, once that slot has started (an early fire
    waits for it)."""
    now = yield effects.call(store.now, store.anow)
    slot = nearest_slot(job.schedule, now, tolerance)
    if slot > now:
        yield effects.pause(slot - now)
    return slot
