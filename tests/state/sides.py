"""The same test body through the sync primitives or their async twins.

A ``Side`` is a database seen through one loop: its connections, the caller's transaction
calls, and the primitives. The async side runs every call on its own event loop, with an
async engine made and disposed on that loop, so a test reads the same either way. Every
statement a side's engine sends is seen by ``counted()``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import MetaData, Table, create_engine, event, text
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import create_async_engine

from mideng import state

R = TypeVar("R")


@dataclass
class Db:
    """One database for a test module: its URLs, a sync engine and the module's tables."""

    name: str
    url: str
    aurl: str
    engine: Engine
    metadata: MetaData
    tables: dict[str, Table] = field(default_factory=dict)

    def rows(self, table: Table, **where: Any) -> list[dict[str, Any]]:
        query = table.select().where(*(table.c[k] == v for k, v in where.items()))
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]


class Side:
    """The sync side: the primitives as they are."""

    name = "sync"

    def __init__(self, db: Db) -> None:
        self.db = db
        self.engine: Any = db.engine
        self.statements: list[str] = []
        self._counting = False
        event.listen(self._sync_engine(), "before_cursor_execute", self._seen)

    def _sync_engine(self) -> Engine:
        return self.engine  # type: ignore[no-any-return]

    def _seen(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if self._counting:
            self.statements.append(statement)

    @contextmanager
    def counted(self) -> Iterator[list[str]]:
        """The statements sent while inside (on any of this side's connections)."""
        self.statements = []
        self._counting = True
        try:
            yield self.statements
        finally:
            self._counting = False

    def close(self) -> None:
        event.remove(self._sync_engine(), "before_cursor_execute", self._seen)

    # -- the caller's own calls ----------------------------------------------------------------
    def _do(self, value: Any) -> Any:
        return value

    def connect(self) -> Any:
        return self.engine.connect()

    def release(self, conn: Any) -> None:
        conn.close()

    def begin(self, conn: Any) -> None:
        conn.begin()

    def commit(self, conn: Any) -> None:
        conn.commit()

    def rollback(self, conn: Any) -> None:
        conn.rollback()

    def execute(self, conn: Any, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        result = self._do(conn.execute(text(sql), params or {}))
        return list(result.fetchall()) if result.returns_rows else [result.rowcount]

    # -- the primitives ------------------------------------------------------------------------
    def insert_once(self, conn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._do(self._call("insert_once", conn, *args, **kwargs))

    def decrement(self, conn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._do(self._call("decrement", conn, *args, **kwargs))

    def update_versioned(self, conn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._do(self._call("update_versioned", conn, *args, **kwargs))

    def update_fenced(self, conn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._do(self._call("update_fenced", conn, *args, **kwargs))

    def advance(self, machine: state.StateMachine, conn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._do(machine.advance(conn, *args, **kwargs))

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(state, name)(*args, **kwargs)


class AsyncSide(Side):
    """The async twins, on an AsyncConnection, each call run to completion on one loop."""

    name = "async"

    def __init__(self, db: Db) -> None:
        self.loop = asyncio.new_event_loop()
        self.async_engine = create_async_engine(db.aurl)
        super().__init__(db)

    def _sync_engine(self) -> Engine:
        return self.async_engine.sync_engine

    def _do(self, value: Any) -> Any:
        if inspect.isawaitable(value):
            return self.loop.run_until_complete(value)
        return value

    def close(self) -> None:
        super().close()
        self.loop.run_until_complete(self.async_engine.dispose())
        self.loop.close()

    def connect(self) -> Any:
        conn = self.async_engine.connect()
        return self._do(conn.start())

    def release(self, conn: Any) -> None:
        self._do(conn.close())

    def begin(self, conn: Any) -> None:
        self._do(conn.begin())

    def commit(self, conn: Any) -> None:
        self._do(conn.commit())

    def rollback(self, conn: Any) -> None:
        self._do(conn.rollback())

    def execute(self, conn: Any, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        result = self._do(conn.execute(text(sql), params or {}))
        return list(result.fetchall()) if result.returns_rows else [result.rowcount]

    def advance(self, machine: state.StateMachine, conn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._do(machine.aadvance(conn, *args, **kwargs))

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(state, "a" + name)(*args, **kwargs)


def sync_engine(url: str) -> Engine:
    return create_engine(url)


@contextmanager
def using(side: Side, mode: str) -> Iterator[Any]:
    """A connection for a test body: in the caller's open transaction (``caller``), which must
    still take the caller's next statement and commit afterwards, or with none (``autocommit``),
    which the primitive must leave committed and closed."""
    conn = side.connect()
    try:
        if mode == "caller":
            side.begin(conn)
        yield conn
        if mode == "caller":
            assert conn.in_transaction()
            assert [tuple(r) for r in side.execute(conn, "SELECT 1")] == [(1,)]
            side.commit(conn)
        else:
            assert not conn.in_transaction()
    finally:
        side.release(conn)
