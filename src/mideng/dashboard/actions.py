"""The dashboard's actions: resolve an UNKNOWN (or stuck) record, release one, requeue dead
outbox rows, reconcile an operation. Each is the conditional operator action below the
dashboard (``mideng.guard.operator``, ``mideng.outbox.dead``, ``Guard.reconcile_operation``),
given what the operator's page showed: a record's status and fence, a row's attempts, an
operation's state and fence. When that changed meanwhile, nothing is done and the answer is a
409 showing what there is now.

Every action needs its typed confirmation (the key, the row id, or ``requeue N``, ``resolve
N``, ``release N`` for N rows of a page); without it nothing is done and the page says what to
type. A dry run (``dry_run=1``) needs no confirmation and changes nothing: it says what the
action would do to what is there now. A bulk action acts on each row on its own, only while it
is as the page showed it.

Each action done writes one audit row (``mideng.stores.audit``): who, when, what, the state
before and after, with the action's own write where that is one statement of SQL (resolve,
release, requeue), after it where it is not (reconcile); and one audit line
(``mideng.observability.logs.operator_action``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mideng.core import effects
from mideng.core.answers import Changed, Done
from mideng.core.audit import AuditEntry
from mideng.core.effects import Effects
from mideng.core.record import Seen, Status
from mideng.dashboard.pages import BadRequest, Dashboard, Page, key_of, one_operation, scope_of
from mideng.guard.operator import arelease_record, aresolve_record, release_record, resolve_record
from mideng.observability import logs
from mideng.operations.results import OperationState, SeenOperation
from mideng.outbox.dead import SeenRow, arequeue, dead_after, requeue
from mideng.stores.audit import RELEASED, AuditStore, record_state, record_target, seen_state

#: The most rows one bulk requeue names (a page's worth, and some).
BULK_MAX = 500


@dataclass
class Outcome:
    """One thing an action was asked about: what it is, what was seen, what is there now,
    and whether the action was (or, in a dry run, would be) done."""

    target: str
    before: str
    after: str
    done: bool


def _field(form: Mapping[str, str], name: str) -> str:
    value = form.get(name, "")
    if not value:
        raise BadRequest(f"the form has no {name}")
    return value


def _seen_record(form: Mapping[str, str]) -> Seen:
    try:
        return Seen(Status(_field(form, "status")), int(_field(form, "fence")))
    except ValueError as exc:
        raise BadRequest("the form's status and fence are not a record's") from exc


def _confirmed(form: Mapping[str, str], expected: str) -> bool:
    """Whether the operator typed ``expected`` (a dry run needs no confirmation)."""
    if form.get("dry_run"):
        return False
    if form.get("confirm", "").strip() != expected:
        raise BadRequest(f"nothing done: type {expected!r} in the confirmation box to confirm")
    return True


# -- records -------------------------------------------------------------------------------
def record_action(dash: Dashboard, name: str, form: Mapping[str, str], who: str) -> Effects[Page]:
    """``resolve`` or ``release`` of one record, as seen."""
    scope, key = scope_of(form.get("scope")), key_of(form.get("key"))
    if scope is None:
        raise BadRequest("a record is named by its scope and key")
    seen = _seen_record(form)
    how = _resolution(form) if name == "resolve" else {}
    if not _confirmed(form, key):
        outcome = yield from _record_dry_run(dash, scope, key, seen)
        return _answer(name, True, [outcome])
    outcome = yield from _record_acted(dash, name, how, scope, key, seen, who)
    return _answer(name, False, [outcome])


def _record_dry_run(dash: Dashboard, scope: str, key: str, seen: Seen) -> Effects[Outcome]:
    """What an action on a record seen at ``seen`` would find: done only while still so."""
    guard = dash.guard
    now = yield effects.call(guard.get, guard.aget, scope, key)
    still = now is not None and Seen(now.status, now.fence) == seen
    return Outcome(record_target(scope, key), seen_state(seen), record_state(now), still)


def _record_acted(
    dash: Dashboard,
    name: str,
    how: dict[str, Any],
    scope: str,
    key: str,
    seen: Seen,
    who: str,
) -> Effects[Outcome]:
    """``resolve`` (settled ``how``) or ``release`` of one record seen at ``seen``: the store
    writes its audit row with it."""
    guard = dash.guard
    target, before = record_target(scope, key), seen_state(seen)
    audit = AuditEntry(who, name, target, before)
    if name == "resolve":
        answer = yield effects.call(
            resolve_record, aresolve_record, guard, scope, key, seen, **how, audit=audit
        )
    else:
        answer = yield effects.call(
            release_record, arelease_record, guard, scope, key, seen, audit=audit
        )
    if isinstance(answer, Done):
        after = RELEASED if name == "release" else record_state(answer.now)
        logs.operator_action(who, name, target, before, after)
        return Outcome(target, before, after, True)
    now = answer.now if isinstance(answer, Changed) else None
    return Outcome(target, before, record_state(now), False)


def _resolution(form: Mapping[str, str]) -> dict[str, Any]:
    """``resolve_record``'s keywords: the effect did not happen, or its result (JSON)."""
    outcome = form.get("outcome")
    if outcome == "failed":
        return {"failed": True}
    if outcome != "result":
        raise BadRequest("say whether the effect happened (a result) or not (failed)")
    try:
        return {"result": json.loads(form.get("result") or "null")}
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"the result is not JSON: {exc}") from exc


def _seen_records(form: Mapping[str, str]) -> list[tuple[str, str, Seen]]:
    """``records``: a JSON list of ``[scope, key, status, fence]``, as the page showed them."""
    try:
        values = json.loads(_field(form, "records"))
        if not isinstance(values, list):
            raise TypeError("not a list")
        seen = []
        for scope, key, status, fence in values:
            named = scope_of(str(scope))
            if named is None:
                raise ValueError("no scope")
            seen.append((named, key_of(str(key)), Seen(Status(status), int(fence))))
    except (ValueError, TypeError) as exc:
        raise BadRequest("the form's records are not [scope, key, status, fence] lists") from exc
    if not seen:
        raise BadRequest("the form names no records")
    if len(seen) > BULK_MAX:
        raise BadRequest(f"at most {BULK_MAX} records at once")
    return seen


def bulk_record_action(
    dash: Dashboard, name: str, form: Mapping[str, str], who: str
) -> Effects[Page]:
    """``resolve`` (each the same way) or ``release`` of the records a page showed, each on
    its own and only while still as seen; confirmed by ``<name> N``."""
    seen = _seen_records(form)
    how = _resolution(form) if name == "resolve" else {}
    outcomes = []
    if not _confirmed(form, f"{name} {len(seen)}"):
        for scope, key, was in seen:
            outcomes.append((yield from _record_dry_run(dash, scope, key, was)))
        return _answer(name, True, outcomes)
    for scope, key, was in seen:
        outcomes.append((yield from _record_acted(dash, name, how, scope, key, was, who)))
    return _answer(name, False, outcomes)


# -- outbox rows ---------------------------------------------------------------------------
def _seen_rows(form: Mapping[str, str]) -> list[SeenRow]:
    """``rows``: ``id:attempts`` pairs, comma-separated, as the page showed them."""
    seen = []
    for pair in _field(form, "rows").split(","):
        row_id, _, attempts = pair.strip().rpartition(":")
        try:
            seen.append(SeenRow(row_id, int(attempts)))
        except ValueError as exc:
            raise BadRequest("the form's rows are not id:attempts pairs") from exc
        if not row_id:
            raise BadRequest("the form's rows are not id:attempts pairs")
    if len(seen) > BULK_MAX:
        raise BadRequest(f"at most {BULK_MAX} rows at once")
    return seen


def requeue_action(dash: Dashboard, form: Mapping[str, str], who: str) -> Effects[Page]:
    outbox = dash.outbox_survey()
    seen = _seen_rows(form)
    expected = seen[0].id if len(seen) == 1 else f"requeue {len(seen)}"
    dry_run = not _confirmed(form, expected)
    table = outbox.table
    answers = yield effects.call(
        lambda: requeue(outbox.engine, seen, dry_run=dry_run, table=table, operator=who),
        lambda: arequeue(outbox.aengine, seen, dry_run=dry_run, table=table, operator=who),
    )
    outcomes = []
    for s in seen:
        answer = answers[s.id]
        before = dead_after(s.attempts)
        if isinstance(answer, Done):
            after = "pending again" if not dry_run else before
            if not dry_run:
                logs.operator_action(who, "requeue", f"outbox row {s.id}", before, after)
            outcomes.append(Outcome(s.id, before, after, True))
        elif isinstance(answer, Changed):
            now = answer.now
            after = f"{_row_state(now.state)} after {now.attempts} attempts"
            outcomes.append(Outcome(s.id, before, after, False))
        else:
            outcomes.append(Outcome(s.id, before, "gone", False))
    return _answer("requeue", dry_run, outcomes)


def _row_state(state: int) -> str:
    from mideng.outbox.survey import STATE_NAMES

    return STATE_NAMES.get(state, str(state))


# -- operations ----------------------------------------------------------------------------
def reconcile_action(dash: Dashboard, form: Mapping[str, str], who: str) -> Effects[Page]:
    scope, key = scope_of(form.get("scope")), key_of(form.get("key"))
    if scope is None:
        raise BadRequest("an operation is named by its scope and key")
    try:
        state = OperationState(_field(form, "state"))
        fence = int(form["fence"]) if form.get("fence") else None
    except ValueError as exc:
        raise BadRequest("the form's state and fence are not an operation's") from exc
    seen = SeenOperation(state, fence)
    target, before = f"operation {scope}:{key}", str(seen)
    guard = dash.guard
    if not _confirmed(form, key):
        now = yield from one_operation(dash, scope, key)
        still = now is not None and now.seen == seen
        shown = "not unfinished" if now is None else now.state.value
        return _answer("reconcile", True, [Outcome(target, before, shown, still)])
    answer = yield effects.call(
        guard.reconcile_operation, guard.areconcile_operation, scope, key, seen
    )
    if isinstance(answer, Done):
        entry = answer.now.audited(who, seen)
        store = guard.store
        if isinstance(store, AuditStore):
            # After the reconcile, not with it: it ran the operation's function, no one write.
            yield effects.call(store.add_audit, store.aadd_audit, entry)
        logs.operator_action(who, "reconcile", target, before, entry.after)
        return _answer("reconcile", False, [Outcome(target, before, entry.after, True)])
    after = answer.now.state.value if isinstance(answer, Changed) else "gone"
    return _answer("reconcile", False, [Outcome(target, before, after, False)])


def _answer(name: str, dry_run: bool, outcomes: list[Outcome]) -> Page:
    """The page of an action's answer: 409 when anything changed since it was seen."""
    changed = any(not o.done for o in outcomes)
    return Page(
        "action.html",
        {"name": name, "dry_run": dry_run, "outcomes": outcomes, "changed": changed},
        409 if changed else 200,
    )


#: Each action by its path below ``/actions/``.
ACTIONS: dict[str, Callable[[Dashboard, Mapping[str, str], str], Effects[Page]]] = {
    "resolve": lambda dash, form, who: record_action(dash, "resolve", form, who),
    "release": lambda dash, form, who: record_action(dash, "release", form, who),
    "resolve-many": lambda dash, form, who: bulk_record_action(dash, "resolve", form, who),
    "release-many": lambda dash, form, who: bulk_record_action(dash, "release", form, who),
    "requeue": requeue_action,
    "reconcile": reconcile_action,
}

__all__ = ["ACTIONS", "BULK_MAX", "Outcome"]
