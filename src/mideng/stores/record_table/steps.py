"""The steps table beside a SQL record table (``<table>_steps``): its statements per kind and
its operations, each a generator of statements (mideng.db).

One row per recorded step, keyed (scope, key, step), and one (step ``''``) for the operation's
arguments. Every write is an ``INSERT … SELECT`` from the record's row under the claim's
condition (core.decide.holds for the claim's owner) with a share lock on that row: a take-over
updates the row, so it waits for a step being recorded, or the step's insert sees the new owner
and inserts nothing. A zombie's step therefore never lands, and a take-over reads every step
recorded before it. The same operations run on the store's own connections (the steps
capability of ``stores.sql`` and ``stores.sqlite``) and inside a caller's transaction (a
transactional step, ``transactional.step_transaction``).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from mideng.core.record import Record
from mideng.db.statements import Op, Sql, Stmt
from mideng.schema.tables import steps_table
from mideng.stores.record_table.ops import get
from mideng.stores.record_table.statements import Statements
from mideng.stores.steps import ARGUMENTS, Finished, OperationEntry, OperationPosition, step_lost


class StepStatements:
    """The steps table's statements for one (kind, record table)."""

    def __init__(self, kind: str, table: str) -> None:
        s = Statements(kind, table)
        t, st, now = table, steps_table(table), s.now
        k = "`key`" if s.mysql else "key"
        lock = {"postgresql": " FOR SHARE", "sqlite": ""}.get(kind, " LOCK IN SHARE MODE")
        held = (
            f"r.scope = :scope AND r.{k} = :key AND r.owner = :owner "
            f"AND r.status = 'processing' AND (r.expires_at IS NULL OR r.expires_at > {now})"
        )
        cols = f"scope, {k}, step, result, codec, at"
        self.record = Sql(
            f"INSERT INTO {st} ({cols}) SELECT r.scope, r.{k}, :step, :result, :codec, {now} "
            f"FROM {t} r WHERE {held}{lock}"
        )
        # What begin answers: the claim's fence when it holds (no row: it does not), with the
        # recorded steps (a NULL step: none yet).
        answer = (
            f"SELECT r.fence, x.step, x.result, x.codec FROM {t} r LEFT JOIN {st} x "
            f"ON x.scope = r.scope AND x.{k} = r.{k} AND x.step <> '' WHERE {held}"
        )
        keep = (
            f"INSERT INTO {st} ({cols}) SELECT r.scope, r.{k}, '', :arguments, :codec, {now} "
            f"FROM {t} r WHERE {held}{lock}"
        )
        if kind == "postgresql":
            # One statement: the CTE's insert and the answer's read share one snapshot, which
            # is all the answer needs (it does not report the arguments).
            self.begin = [
                Sql(
                    f"WITH held AS (SELECT r.scope, r.key FROM {t} r WHERE {held}{lock}), "
                    f"kept AS (INSERT INTO {st} ({cols}) SELECT scope, key, '', :arguments, "
                    f":codec, {now} FROM held ON CONFLICT (scope, key, step) DO NOTHING) "
                    f"{answer}"
                )
            ]
        elif s.mysql:
            self.begin = [Sql(f"{keep} ON DUPLICATE KEY UPDATE at = at; {answer}", sets=2)]
        else:  # SQLite: one local transaction per statement; no DML inside a CTE there
            self.begin = [Sql(keep.replace("INSERT", "INSERT OR IGNORE", 1)), Sql(answer)]
        self.clear = Sql(f"DELETE FROM {st} WHERE scope = :scope AND {k} = :key")

        # The oldest ``limit`` operations (by their arguments' row; ties by scope and key, the
        # order the ``_begun`` index reads them in, since it ends with the primary key) and
        # every row of each: a derived table, since MySQL takes no LIMIT inside IN (...).
        def listing(where: str) -> Sql:
            return Sql(
                f"SELECT x.scope, x.{k}, x.step, CASE WHEN x.step = '' THEN x.result END, "
                f"x.codec, x.at FROM {st} x JOIN (SELECT scope, {k}, at AS began FROM {st} "
                f"WHERE step = '' {where}ORDER BY at, scope, {k} LIMIT :limit) o "
                f"ON x.scope = o.scope AND x.{k} = o.{k} ORDER BY o.began, o.scope, o.{k}, x.at"
            )

        # After a page's last operation: spelt out rather than as a row value, which MySQL
        # does not take as an index range.
        after = (
            f"AND (at > :after_at OR (at = :after_at AND (scope > :after_scope "
            f"OR (scope = :after_scope AND {k} > :after_key)))) "
        )
        self.listing_all = listing("")
        self.listing_scope = listing("AND scope = :scope ")
        self.listing_all_after = listing(after)
        self.listing_scope_after = listing(f"AND scope = :scope {after}")
        self.listing_key = listing(f"AND scope = :scope AND {k} = :key ")
        running = f"SELECT {s.cols} FROM {t} WHERE status = 'processing'"
        self.running_all = Sql(f"{running} ORDER BY created_at LIMIT :limit")
        self.running_scope = Sql(f"{running} AND scope = :scope ORDER BY created_at LIMIT :limit")


@functools.cache
def statements(kind: str, table: str) -> StepStatements:
    return StepStatements(kind, table)


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode()
    return str(value)


def _clocked(s: Statements, params: dict[str, Any]) -> dict[str, Any]:
    if s.python_clock:
        params["now"] = time.time()
    return params


def begin_steps(
    s: Statements, scope: str, key: str, owner: str, arguments: bytes, codec: str
) -> Op[dict[str, Finished]]:
    q = statements(s.kind, s.table)
    params = _clocked(
        s, {"scope": scope, "key": key, "owner": owner, "arguments": arguments, "codec": codec}
    )
    res = None
    for sql in q.begin:
        res = yield Stmt(sql, params)
    assert res is not None
    if not res.rows:
        current = yield from get(s, scope, key)
        raise step_lost(scope, key, owner, current)
    return {
        _text(step): Finished(bytes(result), _text(c))
        for _, step, result, c in res.rows
        if step is not None
    }


def record_step(
    s: Statements, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
) -> Op[None]:
    q = statements(s.kind, s.table)
    params = {"scope": scope, "key": key, "owner": owner, "step": step}
    res = yield Stmt(q.record, _clocked(s, {**params, "result": result, "codec": codec}))
    if res.rowcount != 1:
        current = yield from get(s, scope, key)
        raise step_lost(scope, key, owner, current)


def clear_steps(s: Statements, scope: str, key: str) -> Op[None]:
    yield Stmt(statements(s.kind, s.table).clear, {"scope": scope, "key": key})


def _listed(every: Sql, of_scope: Sql, scope: str | None, limit: int) -> Stmt:
    """A listing of at most ``limit``: ``every`` scope's, or ``of_scope`` for ``scope``."""
    if scope is None:
        return Stmt(every, {"limit": int(limit)})
    return Stmt(of_scope, {"scope": scope, "limit": int(limit)})


def operation(s: Statements, scope: str, key: str) -> Op[OperationEntry | None]:
    q = statements(s.kind, s.table)
    listed = Stmt(q.listing_key, {"scope": scope, "key": key, "limit": 1})
    found = yield from _entries(s, listed, 1)
    return found[0] if found else None


def operations(
    s: Statements, scope: str | None, limit: int, after: OperationPosition | None = None
) -> Op[list[OperationEntry]]:
    q = statements(s.kind, s.table)
    if after is None:
        listed = _listed(q.listing_all, q.listing_scope, scope, limit)
    else:
        listed = _listed(q.listing_all_after, q.listing_scope_after, scope, limit)
        position = {"after_at": after.started_at, "after_scope": after.scope}
        listed = Stmt(listed.sql, {**(listed.params or {}), **position, "after_key": after.key})
    return (yield from _entries(s, listed, limit))


def _entries(s: Statements, listed: Stmt, limit: int) -> Op[list[OperationEntry]]:
    """The operations a listing's rows hold (every step row of each), with their records."""
    res = yield listed
    found: dict[tuple[str, str], OperationEntry] = {}
    for row_scope, row_key, step, arguments, codec, at in res.rows:
        ident = (_text(row_scope), _text(row_key))
        entry = found.get(ident)
        if entry is None:
            if len(found) >= limit:
                continue
            entry = found[ident] = OperationEntry(*ident, None, None, float(at))
        name = _text(step)
        if name == ARGUMENTS:
            entry.arguments = None if arguments is None else bytes(arguments)
            entry.codec = None if codec is None else _text(codec)
            entry.started_at = float(at)
        else:
            entry.steps.append(name)
    for entry in found.values():
        entry.record = yield from get(s, entry.scope, entry.key)
    return list(found.values())


def running(s: Statements, scope: str | None, limit: int) -> Op[list[Record]]:
    q = statements(s.kind, s.table)
    res = yield _listed(q.running_all, q.running_scope, scope, limit)
    return [s.record(row) for row in res.rows]
