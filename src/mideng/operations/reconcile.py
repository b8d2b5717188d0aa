"""``reconcile``: finishing the unfinished operations whose holder is gone.

``reconcile`` runs each unfinished operation in a runnable state again with its stored
arguments through the function registered for its scope in this process (``@guard.operation``
registers it), so it resumes at its first unfinished step; an operation whose function is not
registered here is reported, never guessed. Operations whose record completed but whose kept
steps are left have those cleared. ``plan=True`` answers what a pass would do (``would_run``,
``would_clear``, and what it would skip) and changes nothing.

``reconcile_one`` (``Guard.reconcile_operation`` / ``areconcile_operation``) is an
operator's action on one operation they saw (``SeenOperation``: its state and fence): run
again only while it is still so, else ``Changed(now=the operation)`` or ``Gone``
(mideng.core.answers). The look is a read just before the run; what keeps the operation to
one run is the run's own claim, as for every call: if another reconcile holds it by then,
this one runs nothing (``Changed``), and one that another finished between the look and the
claim is replayed, not run again.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from typing import Any

from mideng.core import effects
from mideng.core.answers import Changed, Done, Gone
from mideng.core.codec import get_codec
from mideng.core.convert import converter
from mideng.core.effects import Effect, Effects
from mideng.errors import ConfigurationError, InProgressError, named
from mideng.guard.driver import Driver
from mideng.observability import logs
from mideng.operations.pending import judge, state_of, store_of, unfinished
from mideng.operations.register import Register, Registered
from mideng.operations.results import (
    OperationState,
    PendingOperation,
    Reconciled,
    ReconcileOutcome,
    SeenOperation,
)
from mideng.stores.steps import OperationEntry

#: States reconcile runs again; the others it reports and leaves.
RUNNABLE = (OperationState.EXPIRED, OperationState.RELEASED, OperationState.RETRYING)
#: Seconds an operation is its caller's to retry before reconcile takes it, by default: a
#: consumer's message comes back after its backoff (a minute at most, by default) and an
#: HTTP client retries sooner still.
MIN_AGE = 300.0


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


def _what_to_do(guard: Driver, item: PendingOperation) -> Reconciled | Registered:
    """What to do with one pending operation: a report, or the function to run it with."""
    if item.state not in RUNNABLE:
        return Reconciled(item.scope, item.key, ReconcileOutcome.SKIPPED, item.state.value)
    known = Register.of(guard).scopes.get(item.scope)
    if known is None:
        why = "no @operation for this scope in this process"
        return Reconciled(item.scope, item.key, ReconcileOutcome.UNREGISTERED, why)
    return known


#: The most of a result or an error a report carries, in characters.
DETAIL_MAX = 200


def described(result: Any) -> str:
    """A run's result as a report's text: a string as it is, anything else as JSON (what is
    not JSON as its ``str``); never a Python repr, which a script reading the report would
    have to unquote."""
    text = result if isinstance(result, str) else json.dumps(result, default=str)
    return text[:DETAIL_MAX]


def _ran(item: PendingOperation, outcome: Any, error: BaseException | None) -> Reconciled:
    if error is None:
        return Reconciled(item.scope, item.key, ReconcileOutcome.FINISHED, described(outcome))
    if isinstance(error, InProgressError):
        return Reconciled(
            item.scope, item.key, ReconcileOutcome.SKIPPED, OperationState.RUNNING.value
        )
    logs.reconcile_failed(item.scope, item.key, error)
    return Reconciled(item.scope, item.key, ReconcileOutcome.FAILED, named(error)[:DETAIL_MAX])


def _not_cleared(entry: OperationEntry, exc: Exception) -> Reconciled:
    """Kept steps that could not be dropped: reported, and left to the next pass."""
    logs.reconcile_failed(entry.scope, entry.key, exc)
    return Reconciled(entry.scope, entry.key, ReconcileOutcome.FAILED, named(exc)[:DETAIL_MAX])


def _left_to_its_caller(item: PendingOperation, now: float, min_age: float) -> Reconciled | None:
    """An operation begun less than ``min_age`` seconds ago, reported and left alone: it is
    its caller's to retry (a consumer's message comes back after its backoff). Reconcile is
    the backstop for what no caller retried; taking young ones too would run them beside
    their callers' retries, and report a flaky provider's first failures as its own."""
    age = now - item.since
    if age >= min_age:
        return None
    why = f"{item.state.value}, begun {age:.0f} s ago"
    return Reconciled(item.scope, item.key, ReconcileOutcome.LEFT_TO_CALLER, why)


def reconcile(
    guard: Driver, scope: str | None, limit: int, plan: bool = False, min_age: float = MIN_AGE
) -> Effects[list[Reconciled]]:
    """One pass: kept steps of completed operations cleared, runnable operations begun at
    least ``min_age`` seconds ago run again (``guard.reconcile`` / ``areconcile`` carry it
    out, blocking or awaited). ``plan``: only what the pass would do, reported; nothing is
    cleared or run."""
    store = store_of(guard)
    entries: list[OperationEntry] = yield effects.call(
        store.operations, store.aoperations, scope, limit
    )
    report = []
    for entry in _done(entries):
        if plan:
            report.append(Reconciled(entry.scope, entry.key, ReconcileOutcome.WOULD_CLEAR))
            continue
        try:
            yield effects.call(store.clear_steps, store.aclear_steps, entry.scope, entry.key)
        except Exception as exc:  # one store error must not cost the others their reconcile
            report.append(_not_cleared(entry, exc))
        else:
            report.append(Reconciled(entry.scope, entry.key, ReconcileOutcome.CLEARED))
    now = time.time()
    for item in unfinished(guard, entries):
        young = _left_to_its_caller(item, now, min_age) if item.state in RUNNABLE else None
        if young is not None:
            report.append(young)
            continue
        known = _what_to_do(guard, item)
        if isinstance(known, Reconciled):
            report.append(known)
            continue
        if plan:
            would = Reconciled(item.scope, item.key, ReconcileOutcome.WOULD_RUN, item.state.value)
            report.append(would)
            continue
        entry = next(e for e in entries if (e.scope, e.key) == (item.scope, item.key))
        try:
            args, kwargs = call_of(known, entry)
            outcome = yield _rerun(known, entry.key, tuple(args), kwargs)
        except Exception as exc:
            report.append(_ran(item, None, exc))
        else:
            report.append(_ran(item, outcome, None))
    return report


#: What ``reconcile_one`` answers.
OneReconciled = Done[Reconciled] | Changed[PendingOperation] | Gone


def reconcile_one(
    guard: Driver, scope: str, key: str, seen: SeenOperation
) -> Effects[OneReconciled]:
    """The operation ``scope``:``key`` run again if it is still as ``seen`` (its state and
    fence): ``Done(now=what reconcile did)`` (a state it does not run, or a scope not
    registered here, is a ``Reconciled`` saying so), ``Changed(now=the operation)`` if it
    moved before its run took it, or ``Gone`` (no steps or arguments kept for it)."""
    store = store_of(guard)
    entry = yield effects.call(store.operation, store.aoperation, scope, key)
    if entry is None:
        return Gone()
    item = judge(guard, entry, time.time())
    if item.seen != seen:
        return Changed(item)
    known = _what_to_do(guard, item)
    if isinstance(known, Reconciled):
        return Done(known)
    try:
        args, kwargs = call_of(known, entry)
        outcome = yield _rerun(known, entry.key, tuple(args), kwargs)
    except InProgressError:
        # Another reconcile, or the operation's caller, claimed it after the look.
        now = yield effects.call(store.operation, store.aoperation, scope, key)
        return Gone() if now is None else Changed(judge(guard, now, time.time()))
    except Exception as exc:
        return Done(_ran(item, None, exc))
    return Done(_ran(item, outcome, None))


def needs_attention(report: list[Reconciled]) -> bool:
    """Whether a pass left an operation an operator must look at (a run failed, or no
    function for its scope): a command's exit 1."""
    wrong = (ReconcileOutcome.FAILED, ReconcileOutcome.UNREGISTERED)
    return any(r.outcome in wrong for r in report)


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
    return [e for e in entries if state_of(e.record, now, 0) is OperationState.DONE]
