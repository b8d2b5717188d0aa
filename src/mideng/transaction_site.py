"""Where a transactional block runs: the caller's SQLAlchemy connection or session.

A site owns the decisions that depend on the caller's transaction:

- none active: the block begins one, and commits or rolls it back itself;
- one active and ``savepoint=True`` (the default): the block is a SAVEPOINT inside it, so an
  exception undoes exactly the block (record and business writes) and leaves the caller's
  transaction usable; the caller commits;
- one active and ``savepoint=False``: no extra round trips; an exception in the body rolls back
  the caller's whole transaction, because it holds an uncommitted claim that must never commit.
"""

from __future__ import annotations

from typing import Any

from mideng.errors import ConfigurationError
from mideng.stores import sql_ops as ops
from mideng.stores.sql_dialect import Res, Statements, Stmt
from mideng.stores.sql_engine import kind_of

_STATEMENTS: dict[tuple[str, str], Statements] = {}


def statements_for(dialect: Any, table: str) -> Statements:
    kind = kind_of(dialect)
    if kind not in ("postgresql", "mariadb", "mysql", "sqlite"):
        raise ConfigurationError(f"transactional mode does not know the {dialect.name} dialect")
    found = _STATEMENTS.get((kind, table))
    if found is None:
        found = _STATEMENTS[(kind, table)] = Statements(kind, table, in_transaction=True)
    return found


def _res(result: Any, mysql: bool) -> Res:
    count = result.rowcount  # before fetching: a drained result may no longer know it
    rows = result.fetchall() if result.returns_rows else ()
    return Res(count, rows, (result.lastrowid or 0) if mysql else 0)


class SyncSite:
    def __init__(self, conn: Any, table: str) -> None:
        from sqlalchemy.engine import Connection
        from sqlalchemy.orm import Session

        if not isinstance(conn, (Connection, Session)):
            raise ConfigurationError(
                f"transaction() takes a SQLAlchemy Connection or Session, got {type(conn)!r}; "
                "use atransaction() for AsyncConnection / AsyncSession"
            )
        self.conn: Any = conn
        self.session = isinstance(conn, Session)
        self.table = table
        self.owned = not conn.in_transaction()
        self.unit: Any = None
        self.link: Any = None
        self.statements: Statements | None = None
        self.mysql = False

    def open(self, savepoint: bool) -> Statements:
        if self.owned:
            self.unit = self.conn.begin()
        elif savepoint:
            self.unit = self.conn.begin_nested()
        self.link = self.conn.connection() if self.session else self.conn
        self.statements = statements_for(self.link.dialect, self.table)
        self.mysql = self.statements.mysql
        return self.statements

    def run(self, gen: ops.Op[ops.T]) -> ops.T:
        stmt = next(gen)
        while True:
            res = _res(self.link.execute(stmt.sql.clause, stmt.params or {}), self.mysql)
            try:
                stmt = gen.send(res)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]

    def commit(self) -> None:
        if self.unit is None:
            return
        try:
            self.unit.commit()
        except BaseException:
            self.rollback(whole=False)
            raise

    def rollback(self, *, whole: bool) -> None:
        if self.unit is not None:
            if self.unit.is_active:
                self.unit.rollback()
        elif whole:
            self.conn.rollback()

    def restart(self) -> Statements:
        """Our own transaction died (a deadlock victim): begin a fresh one."""
        self.rollback(whole=False)
        return self.open(savepoint=False)


class AsyncSite:
    def __init__(self, conn: Any, table: str) -> None:
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

        if not isinstance(conn, (AsyncConnection, AsyncSession)):
            raise ConfigurationError(
                f"atransaction() takes a SQLAlchemy AsyncConnection or AsyncSession, got "
                f"{type(conn)!r}; use transaction() for a sync Connection / Session"
            )
        self.conn: Any = conn
        self.session = isinstance(conn, AsyncSession)
        self.table = table
        self.owned = not conn.in_transaction()
        self.unit: Any = None
        self.link: Any = None
        self.statements: Statements | None = None
        self.mysql = False

    async def open(self, savepoint: bool) -> Statements:
        if self.owned:
            self.unit = await self.conn.begin()
        elif savepoint:
            self.unit = await self.conn.begin_nested()
        self.link = await self.conn.connection() if self.session else self.conn
        self.statements = statements_for(self.link.dialect, self.table)
        self.mysql = self.statements.mysql
        return self.statements

    async def run(self, gen: ops.Op[ops.T]) -> ops.T:
        stmt: Stmt = next(gen)
        while True:
            res = _res(await self.link.execute(stmt.sql.clause, stmt.params or {}), self.mysql)
            try:
                stmt = gen.send(res)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]

    async def commit(self) -> None:
        if self.unit is None:
            return
        try:
            await self.unit.commit()
        except BaseException:
            await self.rollback(whole=False)
            raise

    async def rollback(self, *, whole: bool) -> None:
        if self.unit is not None:
            if self.unit.is_active:
                await self.unit.rollback()
        elif whole:
            await self.conn.rollback()

    async def restart(self) -> Statements:
        await self.rollback(whole=False)
        return await self.open(savepoint=False)
