"""``pending``: the unfinished operations a store keeps, each with its state.

An operation is unfinished while its steps are kept and its record has not completed: its
holder died (the lease ran out), a failed run released it, or a task's failure may run again.
Lease states are judged by this process's clock; the stores decide claims by their own, so a
skewed clock here can only list an operation early or late, never run one twice.
"""

from __future__ import annotations

import time

from mideng.core.record import Record, Status
from mideng.errors import ConfigurationError
from mideng.guard.driver import Driver
from mideng.operations.register import Register
from mideng.operations.results import OperationState, PendingOperation
from mideng.stores.steps import OperationEntry, StepStore


def state_of(record: Record | None, now: float, retry_limit: int) -> OperationState:
    """The state of an operation whose record is ``record`` (None: gone) at ``now``, on a
    scope that runs a failed task at most ``retry_limit`` times."""
    if record is None or record.expired(now):
        return OperationState.RELEASED
    status = record.status
    if status is Status.SUCCEEDED:
        return OperationState.DONE
    if status is Status.PROCESSING:
        return OperationState.RUNNING if record.lease_live(now) else OperationState.EXPIRED
    if status is Status.UNKNOWN:
        return OperationState.UNKNOWN
    if record.error is None:
        return OperationState.RELEASED
    return OperationState.RETRYING if record.attempts < retry_limit else OperationState.FAILED


def store_of(guard: Driver) -> StepStore:
    """The Guard's store, which keeps the operations' steps."""
    store = guard.store
    if not isinstance(store, StepStore):
        raise ConfigurationError(f"{store!r} keeps no steps: it has no operations to list")
    return store


def unfinished(guard: Driver, entries: list[OperationEntry]) -> list[PendingOperation]:
    """The operations among ``entries`` whose record has not completed, as reported."""
    now = time.time()
    judged = (judge(guard, entry, now) for entry in entries)
    return [item for item in judged if item.state is not OperationState.DONE]


def judge(guard: Driver, entry: OperationEntry, now: float) -> PendingOperation:
    """One operation as reported at ``now``, whatever its state (DONE too)."""
    known = Register.of(guard).scopes.get(entry.scope)
    options = known.options if known is not None else {}
    state = state_of(entry.record, now, guard.policy(entry.scope, **options).retry_limit)
    done = {step.rpartition("#")[0] for step in entry.steps}
    left = None if not known or not known.steps else [s for s in known.steps if s not in done]
    record = entry.record
    return PendingOperation(
        entry.scope,
        entry.key,
        state,
        list(entry.steps),
        left,
        0 if record is None else record.attempts,
        entry.started_at,
        known is not None,
        record,
    )


def pending(guard: Driver, scope: str | None, limit: int) -> list[PendingOperation]:
    return unfinished(guard, store_of(guard).operations(scope, limit))


async def apending(guard: Driver, scope: str | None, limit: int) -> list[PendingOperation]:
    return unfinished(guard, await store_of(guard).aoperations(scope, limit))
