"""Finding and finishing unfinished work: ``pending``, ``reconcile`` and ``stale``.

An operation is unfinished while its steps are kept and its record has not completed: its
holder died (the lease ran out), a failed run released it, or a task's failure may run again.
``reconcile`` runs each such operation again with its stored arguments through the function
registered for its scope in this process (``@guard.operation`` registers it), so it resumes at
its first unfinished step; an operation whose function is not registered here is reported,
never guessed. ``stale`` is the task table's "RUNNING too long: a human should look" rule.

Lease states are judged by this process's clock; the stores decide claims by their own, so a
skewed clock here can only list an operation early or late, never run one twice.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import typing
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mideng.core import effects
from mideng.core.calls import is_async
from mideng.core.codec import get_codec
from mideng.core.convert import converter
from mideng.core.effects import Effect, Effects
from mideng.core.record import Record, Status
from mideng.errors import ConfigurationError, InProgressError
from mideng.guard.driver import Driver
from mideng.observability import logs
from mideng.stores.steps import OperationEntry, StepStore

#: States reconcile runs again; the others it reports and leaves.
RUNNABLE = ("expired", "released", "retrying")

#: An operation run under a given key (the one it is stored under) with given arguments:
#: what reconcile calls, since arguments rebuilt from storage may render another key.
Rerun = Callable[[str | None, tuple[Any, ...], dict[str, Any]], Any]


@dataclass(frozen=True)
class Registered:
    """An operation's function as this process knows it."""

    wrapper: Callable[..., Any]
    rerun: Rerun
    signature: inspect.Signature
    hints: dict[str, Any]
    steps: tuple[str, ...]
    options: dict[str, Any]
    coroutine: bool


class Register:
    """The operations registered with one Guard, by scope."""

    _all: typing.ClassVar[weakref.WeakKeyDictionary[Any, Register]] = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self.scopes: dict[str, Registered] = {}

    @classmethod
    def of(cls, guard: Any) -> Register:
        found = cls._all.get(guard)
        if found is None:
            found = cls._all[guard] = cls()
        return found

    def add(
        self,
        scope: str,
        wrapper: Callable[..., Any],
        rerun: Rerun,
        fn: Callable[..., Any],
        steps: tuple[str, ...],
        options: dict[str, Any],
    ) -> None:
        try:
            hints = typing.get_type_hints(fn)
        except Exception:
            hints = {}
        self.scopes[scope] = Registered(
            wrapper,
            rerun,
            inspect.signature(fn),
            hints,
            steps,
            dict(options),
            is_async(fn),
        )


@dataclass
class PendingOperation:
    """An unfinished operation. ``state``: running (a live holder), expired (its holder
    stopped renewing), released (a failed run let go), retrying (a task failure that may run
    again), failed (a recorded failure), unknown (an UNKNOWN record: resolve it first)."""

    scope: str
    key: str
    state: str
    steps_done: list[str]
    steps_left: list[str] | None  # None: the operation did not declare its steps
    attempts: int
    since: float  # when the operation first started (store clock)
    registered: bool
    record: Record | None = field(default=None, repr=False)


@dataclass
class Reconciled:
    """What reconcile did with one operation: finished, failed, skipped, unregistered or
    cleared (its record had completed; only its kept steps were left)."""

    scope: str
    key: str
    outcome: str
    detail: str = ""


@dataclass
class StaleTask:
    """A processing record nobody should leave alone: why, and since when (first claim)."""

    record: Record
    reason: str
    running_for: float


def state_of(record: Record | None, now: float, retry_limit: int) -> str:
    if record is None or record.expired(now):
        return "released"
    status = record.status
    if status is Status.SUCCEEDED:
        return "done"
    if status is Status.PROCESSING:
        return "running" if record.lease_live(now) else "expired"
    if status is Status.UNKNOWN:
        return "unknown"
    if record.error is None:
        return "released"
    return "retrying" if record.attempts < retry_limit else "failed"


def _store(guard: Driver) -> StepStore:
    store = guard.store
    if not isinstance(store, StepStore):
        raise ConfigurationError(f"{store!r} keeps no steps: it has no operations to list")
    return store


def _pending(guard: Driver, entries: list[OperationEntry]) -> list[PendingOperation]:
    now, register = time.time(), Register.of(guard)
    found = []
    for entry in entries:
        known = register.scopes.get(entry.scope)
        options = known.options if known is not None else {}
        state = state_of(entry.record, now, guard.policy(entry.scope, **options).retry_limit)
        if state == "done":
            continue
        done = {step.rpartition("#")[0] for step in entry.steps}
        left = None if not known or not known.steps else [s for s in known.steps if s not in done]
        record = entry.record
        found.append(
            PendingOperation(
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
        )
    return found


def pending(guard: Driver, scope: str | None, limit: int) -> list[PendingOperation]:
    return _pending(guard, _store(guard).operations(scope, limit))


async def apending(guard: Driver, scope: str | None, limit: int) -> list[PendingOperation]:
    return _pending(guard, await _store(guard).aoperations(scope, limit))


def call_of(known: Registered, entry: OperationEntry) -> tuple[list[Any], dict[str, Any]]:
    """The stored arguments as a call: rebuilt to the parameters' declared types."""
    if entry.arguments is None or entry.codec is None:
        raise ConfigurationError("its arguments were never stored")
    codec = get_codec(entry.codec)
    raw = codec.decode(entry.arguments)
    if codec.name == "json":
        raw = {n: converter(known.hints.get(n, Any))(v) for n, v in raw.items()}
    params = known.signature.parameters.values()
    spread = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in params:
        if p.name not in raw:
            continue
        value = raw[p.name]
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(value)
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            kwargs.update(value)
        elif p.kind is inspect.Parameter.POSITIONAL_ONLY or (
            spread and p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        ):
            args.append(value)
        else:
            kwargs[p.name] = value
    return args, kwargs


def _plan(guard: Driver, item: PendingOperation) -> Reconciled | Registered:
    """What to do with one pending operation: a report, or the function to run it with."""
    if item.state not in RUNNABLE:
        return Reconciled(item.scope, item.key, "skipped", item.state)
    known = Register.of(guard).scopes.get(item.scope)
    if known is None:
        return Reconciled(
            item.scope, item.key, "unregistered", "no @operation for this scope in this process"
        )
    return known


def _ran(item: PendingOperation, outcome: Any, error: BaseException | None) -> Reconciled:
    if error is None:
        return Reconciled(item.scope, item.key, "finished", repr(outcome)[:200])
    if isinstance(error, InProgressError):
        return Reconciled(item.scope, item.key, "skipped", "running")
    logs.reconcile_failed(item.scope, item.key, error)
    return Reconciled(item.scope, item.key, "failed", repr(error)[:200])


def _not_cleared(entry: OperationEntry, exc: Exception) -> Reconciled:
    """Kept steps that could not be dropped: reported, and left to the next pass."""
    logs.reconcile_failed(entry.scope, entry.key, exc)
    return Reconciled(entry.scope, entry.key, "failed", repr(exc)[:200])


def reconcile(guard: Driver, scope: str | None, limit: int) -> Effects[list[Reconciled]]:
    """One pass: kept steps of completed operations cleared, runnable operations run again
    (``guard.reconcile`` / ``areconcile`` carry it out, blocking or awaited)."""
    store = _store(guard)
    entries: list[OperationEntry] = yield effects.call(
        store.operations, store.aoperations, scope, limit
    )
    report = []
    for entry in _done(entries):
        try:
            yield effects.call(store.clear_steps, store.aclear_steps, entry.scope, entry.key)
        except Exception as exc:  # one store error must not cost the others their reconcile
            report.append(_not_cleared(entry, exc))
        else:
            report.append(Reconciled(entry.scope, entry.key, "cleared"))
    for item in _pending(guard, entries):
        plan = _plan(guard, item)
        if isinstance(plan, Reconciled):
            report.append(plan)
            continue
        entry = next(e for e in entries if (e.scope, e.key) == (item.scope, item.key))
        try:
            args, kwargs = call_of(plan, entry)
            outcome = yield _rerun(plan, entry.key, tuple(args), kwargs)
        except Exception as exc:
            report.append(_ran(item, None, exc))
        else:
            report.append(_ran(item, outcome, None))
    return report


def _rerun(
    plan: Registered, key: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Effect[Any]:
    """The operation run again: a ``def`` blocking, or in a thread from the event loop; an
    ``async def`` awaited, or on a loop of its own from a blocking caller."""
    rerun = plan.rerun
    if plan.coroutine:
        return Effect(lambda *a: asyncio.run(rerun(*a)), rerun, (key, args, kwargs), {})

    async def in_thread(*a: Any) -> Any:
        return await asyncio.to_thread(rerun, *a)

    return Effect(rerun, in_thread, (key, args, kwargs), {})


def _done(entries: list[OperationEntry]) -> list[OperationEntry]:
    """Operations whose record completed but whose kept steps are left (the process died
    between the two writes, or the store failed at the second)."""
    now = time.time()
    return [e for e in entries if state_of(e.record, now, 0) == "done"]


def _stale(
    records: list[Record],
    older_than: float | None,
    alert: Callable[[list[StaleTask]], Any] | None,
) -> list[StaleTask]:
    now = time.time()
    found = []
    for record in records:
        running_for = now - record.created_at
        if not record.lease_live(now):
            until = record.lease_until or record.updated_at
            reason = f"its holder stopped renewing (lease ran out {now - until:.1f}s ago)"
        elif older_than is not None and running_for > older_than:
            reason = f"running for {running_for:.1f}s, over {older_than:g}s"
        else:
            continue
        logs.stale_task(record.scope, record.key, reason)
        found.append(StaleTask(record, reason, running_for))
    if found and alert is not None:
        alert(found)
    return found


def stale(
    guard: Driver,
    older_than: float | None,
    scope: str | None,
    limit: int,
    alert: Callable[[list[StaleTask]], Any] | None,
) -> Effects[list[StaleTask]]:
    """Processing records whose holder stopped renewing, or that ran past ``older_than``."""
    store = _store(guard)
    records = yield effects.call(store.running, store.arunning, scope, limit)
    return _stale(records, older_than, alert)
