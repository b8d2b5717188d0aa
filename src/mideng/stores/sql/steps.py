"""The steps capability on a SQL record table: a ``<table>_steps`` table beside it.

One row per recorded step, keyed (scope, key, step), and one (step ``''``) for the operation's
arguments. Every write is an ``INSERT … SELECT`` from the record's row under the claim's
condition (core.decide.holds for the claim's owner) with a share lock on that row: a take-over
updates the row, so it waits for a step being recorded, or the step's insert sees the new owner
and inserts nothing. A zombie's step therefore never lands, and a take-over reads every step
recorded before it. The same operations run on the store's own connections (SQLStore,
SQLiteStore) and inside a caller's transaction (a transactional step, through mideng.db.site).
"""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from mideng.core.loops import to_thread
from mideng.core.record import Record
from mideng.db.drive import drive
from mideng.db.site import AsyncSite, Site
from mideng.db.statements import Op, Sql, Stmt, T
from mideng.errors import StoreUnavailableError
from mideng.schema.tables import steps_table
from mideng.stores.sql.embedded import execute_sqlite
from mideng.stores.sql.execute import AsyncExecutor, Executor
from mideng.stores.sql.ops import get
from mideng.stores.sql.statements import Statements
from mideng.stores.sql.table import RecordTable
from mideng.stores.steps import ARGUMENTS, Finished, OperationEntry, StepStore, step_lost


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

        # The oldest ``limit`` operations (by their arguments' row) and every row of each: a
        # derived table, since MySQL takes no LIMIT inside IN (...).
        def listing(where: str) -> Sql:
            return Sql(
                f"SELECT x.scope, x.{k}, x.step, CASE WHEN x.step = '' THEN x.result END, "
                f"x.codec, x.at FROM {st} x JOIN (SELECT scope, {k} FROM {st} WHERE step = '' "
                f"{where}ORDER BY at LIMIT :limit) o ON x.scope = o.scope AND x.{k} = o.{k} "
                "ORDER BY x.at"
            )

        self.listing_all = listing("")
        self.listing_scope = listing("AND scope = :scope ")
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


def operations(s: Statements, scope: str | None, limit: int) -> Op[list[OperationEntry]]:
    q = statements(s.kind, s.table)
    res = yield _listed(q.listing_all, q.listing_scope, scope, limit)
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


class SQLSteps(StepStore):
    """The capability on SQLStore's own connections: each operation one ``drive``."""

    executor: Executor
    aexecutor: AsyncExecutor

    def begin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        return self.executor.drive(begin_steps, scope, key, owner, arguments, codec)

    def record_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        self.executor.drive(record_step, scope, key, owner, step, result, codec)

    def clear_steps(self, scope: str, key: str) -> None:
        self.executor.drive(clear_steps, scope, key)

    def operations(self, scope: str | None = None, limit: int = 100) -> list[OperationEntry]:
        return self.executor.drive(operations, scope, limit)

    def running(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return self.executor.drive(running, scope, limit)

    async def abegin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        return await self.aexecutor.drive(begin_steps, scope, key, owner, arguments, codec)

    async def arecord_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        await self.aexecutor.drive(record_step, scope, key, owner, step, result, codec)

    async def aclear_steps(self, scope: str, key: str) -> None:
        await self.aexecutor.drive(clear_steps, scope, key)

    async def aoperations(self, scope: str | None = None, limit: int = 100) -> list[OperationEntry]:
        return await self.aexecutor.drive(operations, scope, limit)

    async def arunning(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return await self.aexecutor.drive(running, scope, limit)


class SQLiteSteps(StepStore):
    """The capability on SQLiteStore's connections: the same operations, each statement an
    autocommit transaction of its own (the write's condition and insert are one statement)."""

    offload_reason = "an embedded store: its sync operations are short local transactions"
    table: str
    path: str
    _conn: Callable[[], Any]

    def _drive_steps(self, op: Callable[..., Op[T]], *args: Any) -> T:
        try:
            return drive(op(_sqlite(self.table), *args), execute_sqlite, self._conn())
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"SQLite store {self.path} failed: {exc}") from exc

    def begin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        return self._drive_steps(begin_steps, scope, key, owner, arguments, codec)

    def record_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        self._drive_steps(record_step, scope, key, owner, step, result, codec)

    def clear_steps(self, scope: str, key: str) -> None:
        self._drive_steps(clear_steps, scope, key)

    def operations(self, scope: str | None = None, limit: int = 100) -> list[OperationEntry]:
        return self._drive_steps(operations, scope, limit)

    def running(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return self._drive_steps(running, scope, limit)

    async def abegin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        return await to_thread(self.begin_steps, scope, key, owner, arguments, codec)

    async def arecord_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        await to_thread(self.record_step, scope, key, owner, step, result, codec)

    async def aclear_steps(self, scope: str, key: str) -> None:
        await to_thread(self.clear_steps, scope, key)

    async def aoperations(self, scope: str | None = None, limit: int = 100) -> list[OperationEntry]:
        return await to_thread(self.operations, scope, limit)

    async def arunning(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return await to_thread(self.running, scope, limit)


@functools.cache
def _sqlite(table: str) -> Statements:
    return Statements("sqlite", table)


@contextmanager
def step_transaction(conn: Any, table: RecordTable) -> Iterator[Callable[..., None]]:
    """Run a step inside the caller's transaction on ``conn`` (beginning one when none is
    active, and then committing it); what it yields records the step there, so the record
    commits or rolls back with the step's own writes."""
    site = Site(conn)
    try:
        # atomic: on an AUTOCOMMIT connection the record would commit apart from the step's
        # writes. Inside the try: a Session whose connection can't be had is not left in the
        # transaction begun for it.
        s = table.statements(site.open(False, atomic=True))
    except BaseException:
        site.rollback(whole=False)
        raise
    try:
        yield lambda *step: site.run(record_step(s, *step))
    except BaseException:
        site.rollback(whole=False)
        raise
    site.commit()


@asynccontextmanager
async def astep_transaction(conn: Any, table: RecordTable) -> AsyncIterator[Any]:
    """``step_transaction`` on an AsyncConnection / AsyncSession; what it yields is awaited."""
    site = AsyncSite(conn)
    try:
        s = table.statements(await site.open(False, atomic=True))
    except BaseException:
        await site.rollback(whole=False)
        raise
    try:
        yield lambda *step: site.run(record_step(s, *step))
    except BaseException:
        await site.rollback(whole=False)
        raise
    await site.commit()
