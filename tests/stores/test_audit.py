"""The audit capability on every store: an operator's resolve or release given an audit entry
writes one row with it (none when the record changed meanwhile), rows page newest first by
keyset and filter exactly; on SQL the row is in the action's transaction, so an audit row that
cannot be written undoes the action."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import create_engine, text

from mideng import Guard
from mideng.core.answers import Changed, Done
from mideng.core.audit import AuditEntry, AuditQuery
from mideng.core.record import ClaimRequest, ExpiryPolicy, Seen, Status
from mideng.errors import StoreUnavailableError
from mideng.guard import operator
from mideng.stores.audit import AuditStore
from tests.backends import Opened
from tests.runner import Runner

LEASE = 0.2


def _unknown(opened: Opened, guard: Guard, scope: str, keys: list[str]) -> dict[str, Seen]:
    """``keys`` claimed, abandoned, then found UNKNOWN by a second claim: as seen."""
    import time

    guard.configure_scope(scope, on_expiry="unknown")
    for key in keys:
        opened.store.claim(
            ClaimRequest(scope, key, uuid.uuid4().hex, LEASE, 60.0, None, ExpiryPolicy.UNKNOWN)
        )
    time.sleep(LEASE + 0.1)
    seen = {}
    for key in keys:
        claim = opened.store.claim(
            ClaimRequest(scope, key, "someone", LEASE, 60.0, None, ExpiryPolicy.UNKNOWN)
        )
        assert claim.record.status is Status.UNKNOWN
        seen[key] = Seen(claim.record.status, claim.record.fence)
    return seen


def _store(opened: Opened) -> AuditStore:
    assert isinstance(opened.store, AuditStore)
    return opened.store


def _add(runner: Runner, store: AuditStore, entry: AuditEntry) -> None:
    runner.do(lambda: store.aadd_audit(entry), lambda: store.add_audit(entry))


def _rows(runner: Runner, store: AuditStore, query: AuditQuery) -> list[tuple[str, ...]]:
    found = runner.do(lambda: store.aaudit_rows(query), lambda: store.audit_rows(query))
    return [(r.operator, r.action, r.target, r.before, r.after) for r in found]


def test_an_action_with_an_entry_writes_one_row_and_a_refused_one_none(
    opened: Opened, runner: Runner
) -> None:
    guard = Guard(opened.store)
    scope = f"audit-{uuid.uuid4().hex[:6]}"
    seen = _unknown(opened, guard, scope, ["a", "b"])
    resolved = AuditEntry("ann", "resolve", f"{scope}:a", "unknown")
    answer = runner.do(
        lambda: operator.aresolve_record(guard, scope, "a", seen["a"], failed=True, audit=resolved),
        lambda: operator.resolve_record(guard, scope, "a", seen["a"], failed=True, audit=resolved),
    )
    assert isinstance(answer, Done)
    released = AuditEntry("bob", "release", f"{scope}:b", "unknown")
    answer = runner.do(
        lambda: operator.arelease_record(guard, scope, "b", seen["b"], audit=released),
        lambda: operator.release_record(guard, scope, "b", seen["b"], audit=released),
    )
    assert isinstance(answer, Done)
    # Seen again as it was: the record moved on, the answer says so and no row is added.
    again = runner.do(
        lambda: operator.aresolve_record(guard, scope, "a", seen["a"], failed=True, audit=resolved),
        lambda: operator.resolve_record(guard, scope, "a", seen["a"], failed=True, audit=resolved),
    )
    assert isinstance(again, Changed)
    rows = _rows(runner, _store(opened), AuditQuery(limit=10))
    fence = seen["a"].fence
    assert rows == [
        ("bob", "release", f"{scope}:b", "unknown", "released (deleted)"),
        ("ann", "resolve", f"{scope}:a", "unknown", f"failed (fence {fence}, attempts 1)"),
    ]


def test_the_audit_pages_newest_first_by_keyset_and_filters(opened: Opened, runner: Runner) -> None:
    store = _store(opened)
    for n in range(5):
        _add(runner, store, AuditEntry("ann" if n % 2 else "bob", "requeue", f"t{n}", "x", "y"))
    found = runner.do(
        lambda: store.aaudit_rows(AuditQuery(limit=2)),
        lambda: store.audit_rows(AuditQuery(limit=2)),
    )
    assert [r.target for r in found] == ["t4", "t3"]
    assert found[0].at >= found[1].at > 0
    rest = AuditQuery(before=found[-1].id, limit=10)
    assert [r[2] for r in _rows(runner, store, rest)] == ["t2", "t1", "t0"]
    assert [r[2] for r in _rows(runner, store, AuditQuery(operator="ann"))] == ["t3", "t1"]
    assert _rows(runner, store, AuditQuery(action="resolve")) == []
    assert [r[2] for r in _rows(runner, store, AuditQuery(target="t2"))] == ["t2"]


def test_an_audit_row_that_cannot_be_written_undoes_the_action(
    opened: Opened, request: pytest.FixtureRequest
) -> None:
    """SQL stores: the audit table gone, the resolve fails whole and the record stays
    UNKNOWN (a row written after the action, in a transaction of its own, would leave the
    record settled and the audit without it)."""
    table = opened.options.get("table")
    if opened.url is None or not opened.url.startswith(("sqlite", "postgresql", "mysql")):
        pytest.skip("the audit is written in the action's transaction on SQL stores only")
    guard = Guard(opened.store)
    scope = f"audit-{uuid.uuid4().hex[:6]}"
    seen = _unknown(opened, guard, scope, ["a"])
    url = opened.url.split("?")[0] if table else opened.url
    audit_table = f"{table or 'mideng_records'}_audit"
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text(f"DROP TABLE {audit_table}"))
    engine.dispose()
    entry = AuditEntry("ann", "resolve", f"{scope}:a", "unknown")
    with pytest.raises(StoreUnavailableError):
        operator.resolve_record(guard, scope, "a", seen["a"], result={"ok": 1}, audit=entry)
    record = guard.get(scope, "a")
    assert record is not None
    assert record.status is Status.UNKNOWN


def test_no_statement_of_mideng_changes_or_deletes_an_audit_row() -> None:
    """Append-only: the audit's statements insert and select; nothing in the package names an
    audit table in an UPDATE or a DELETE (dropping the table is a migration's undo)."""
    import re
    from pathlib import Path

    import mideng
    from mideng.schema.audit import AuditStatements

    statements = AuditStatements("t")
    page, _ = statements.page(AuditQuery(operator="a", before="3"))
    assert statements.add.text.startswith("INSERT INTO t_audit ")
    assert page.text.startswith("SELECT ")
    changing = re.compile(r"(UPDATE|DELETE\s+FROM)\s+\S*audit", re.IGNORECASE)
    found = [
        f"{path.name}: {match.group(0)}"
        for path in Path(mideng.__file__).parent.rglob("*.py")
        for match in changing.finditer(path.read_text())
    ]
    assert found == []
