"""Where an operation runs inside a caller's transaction: their SQLAlchemy connection or session.

``Site`` takes a ``Connection`` or ``Session``, ``AsyncSite`` an ``AsyncConnection`` or
``AsyncSession``; ``site_for`` picks ``Site``, or ``DjangoSite`` for a Django connection. A
site owns the decisions that depend on the caller's transaction:

- none active (``owned``): the site begins one, and commits or rolls it back itself;
- one active and ``savepoint=True``: the site's work is a SAVEPOINT inside it, so ``rollback``
  undoes exactly that work and leaves the caller's transaction usable; the caller commits;
- one active and ``savepoint=False``: no extra round trips; ``rollback(whole=True)`` rolls back
  the caller's whole transaction (for work that must never commit, such as an uncommitted
  claim), ``rollback(whole=False)`` leaves it alone.

``open`` returns the statement kind of the connection (mideng.db.dialect), ``run`` drives an
operation on it. ``open(..., atomic=True)`` is for work that must commit as one: it refuses a
connection in AUTOCOMMIT isolation, whose every statement commits on its own. The rules live
in mideng.db.rules, written once for these sites and Django's (mideng.db.django_connection);
the two classes here only do the I/O.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from mideng.db.dialect import is_mysql, kind_of
from mideng.db.django_connection import DjangoSite, is_django_connection
from mideng.db.drive import AsyncExecute, Execute, adrive, drive
from mideng.db.rules import BlockingSite, Rules
from mideng.db.statements import Op, Res, Stmt, T
from mideng.errors import ConfigurationError


def _res(result: Any, mysql: bool) -> Res:
    count = result.rowcount  # before fetching: a drained result may no longer know it
    rows = result.fetchall() if result.returns_rows else ()
    # psycopg has no lastrowid; only MySQL's means something here (a stamp handed back).
    return Res(count, rows, (result.lastrowid or 0) if mysql else 0)


def _execute(connection: Any, stmt: Stmt) -> Res:
    return _res(connection.execute(stmt.sql.clause, stmt.params or {}), False)


def _execute_mysql(connection: Any, stmt: Stmt) -> Res:
    return _res(connection.execute(stmt.sql.clause, stmt.params or {}), True)


async def _aexecute(connection: Any, stmt: Stmt) -> Res:
    return _res(await connection.execute(stmt.sql.clause, stmt.params or {}), False)


async def _aexecute_mysql(connection: Any, stmt: Stmt) -> Res:
    return _res(await connection.execute(stmt.sql.clause, stmt.params or {}), True)


def execute_for(kind: str) -> Execute:
    """How one statement runs on a SQLAlchemy ``Connection`` of statement kind ``kind``."""
    return _execute_mysql if is_mysql(kind) else _execute


def aexecute_for(kind: str) -> AsyncExecute:
    """How one statement runs on a SQLAlchemy ``AsyncConnection`` of ``kind``."""
    return _aexecute_mysql if is_mysql(kind) else _aexecute


class _Rules(Rules):
    """The SQLAlchemy part both sites share: what they accept, and how they find the
    statement kind and refuse AUTOCOMMIT isolation."""

    def __init__(self, conn: Any, kinds: tuple[type[Any], type[Any]], elsewhere: str) -> None:
        """``kinds``: the connection and the session class the site takes; ``elsewhere``:
        where any other connection goes instead."""
        connection, session = kinds
        if not isinstance(conn, kinds):
            raise ConfigurationError(
                f"expected a SQLAlchemy {connection.__name__} or {session.__name__}, "
                f"got {type(conn)!r}; {elsewhere}"
            )
        super().__init__(conn, owned=not conn.in_transaction())
        self.session = isinstance(conn, session)

    def _transaction_call(self) -> Callable[[], Any]:
        return self.conn.begin  # type: ignore[no-any-return]

    def _savepoint_call(self) -> Callable[[], Any]:
        return self.conn.begin_nested  # type: ignore[no-any-return]

    def _callers_rollback(self) -> Callable[[], Any]:
        return self.conn.rollback  # type: ignore[no-any-return]

    def _opened(self, connection: Any) -> str:
        self.connection = connection
        self.kind = kind_of(connection.dialect)
        return self.kind

    def _early(self, atomic: bool) -> bool:
        # Checked before anything is begun, except on a Session the site is to begin: asking
        # it for its connection first would begin its transaction already.
        return atomic and not (self.session and self.owned)

    @staticmethod
    def _atomic(connection: Any) -> None:
        sync = getattr(connection, "sync_connection", None) or connection
        # SQLAlchemy 2's own test (no round trip); the execution option where it is absent.
        check = getattr(sync, "_is_autocommit_isolation", None)
        if check is not None:
            autocommit = bool(check())
        else:
            autocommit = sync.get_execution_options().get("isolation_level") == "AUTOCOMMIT"
        if autocommit:
            raise ConfigurationError(
                "this connection runs in AUTOCOMMIT isolation: each statement would commit on "
                "its own, so the record would be durable before the block's writes and "
                "survive their rollback; use a connection in a transactional isolation level"
            )


# The SQLAlchemy classes a site accepts, imported on first use and kept: an import statement
# costs more than the rest of building a site, which happens once per operation.
_SYNC: tuple[type, type] | None = None
_ASYNC: tuple[type, type] | None = None


def _sync() -> tuple[type, type]:
    global _SYNC
    if _SYNC is None:
        from sqlalchemy.engine import Connection
        from sqlalchemy.orm import Session

        _SYNC = (Connection, Session)
    return _SYNC


def _async() -> tuple[type, type]:
    global _ASYNC
    if _ASYNC is None:
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

        _ASYNC = (AsyncConnection, AsyncSession)
    return _ASYNC


class Site(_Rules, BlockingSite):
    """A sync SQLAlchemy ``Connection`` or ``Session``; undone and restarted as every
    blocking site is (``BlockingSite``)."""

    def __init__(self, conn: Any) -> None:
        elsewhere = "an AsyncConnection or AsyncSession goes to the async twin (atransaction())"
        super().__init__(conn, _SYNC or _sync(), elsewhere)

    def open(self, savepoint: bool, *, atomic: bool = False, left_open: bool = False) -> str:
        """Begin the site's transaction or savepoint, as the rules say; the statement kind.
        ``atomic``: work that must commit as one (a record with its writes) refuses a
        connection in AUTOCOMMIT isolation, before any statement is sent. ``left_open``: the
        caller will end the transaction (as after SQLAlchemy's own autobegin), whoever began
        it."""
        early = self._early(atomic)
        if early:
            self._atomic(self.conn.connection() if self.session else self.conn)
        begin = self._begin(savepoint)
        if begin is not None:
            self.begun = begin()
        kind = self._opened(self.conn.connection() if self.session else self.conn)
        if atomic and not early:
            self._atomic(self.connection)
        return kind

    def run(self, op: Op[T]) -> T:
        return drive(op, execute_for(self.kind), self.connection)

    def commit(self) -> None:
        """Commit what the site began (nothing if it began nothing: the caller commits)."""
        if self.begun is None:
            return
        try:
            self.begun.commit()
        except BaseException:
            undo = self._after_failed_commit()
            with contextlib.suppress(Exception):  # the commit's own error is the one to raise
                undo()
            raise


class AsyncSite(_Rules):
    """An ``AsyncConnection`` or ``AsyncSession``: ``Site`` awaited."""

    def __init__(self, conn: Any) -> None:
        elsewhere = (
            "a sync Connection or Session, or a Django connection, goes to the sync twin "
            "(transaction())"
        )
        super().__init__(conn, _ASYNC or _async(), elsewhere)

    async def open(self, savepoint: bool, *, atomic: bool = False, left_open: bool = False) -> str:
        early = self._early(atomic)
        if early:
            self._atomic(await self.conn.connection() if self.session else self.conn)
        begin = self._begin(savepoint)
        if begin is not None:
            self.begun = await begin()
        kind = self._opened(await self.conn.connection() if self.session else self.conn)
        if atomic and not early:
            self._atomic(self.connection)
        return kind

    async def run(self, op: Op[T]) -> T:
        return await adrive(op, aexecute_for(self.kind), self.connection)

    async def commit(self) -> None:
        if self.begun is None:
            return
        try:
            await self.begun.commit()
        except BaseException:
            undo = self._after_failed_commit()
            with contextlib.suppress(Exception):
                await undo()
            raise

    async def rollback(self, *, whole: bool) -> None:
        undo = self._undo(whole)
        if undo is not None:
            await undo()

    async def restart(self) -> str:
        await self.rollback(whole=False)
        return await self.open(savepoint=False)


def site_for(conn: Any) -> Site | DjangoSite:
    """The blocking site for a caller's connection: a SQLAlchemy ``Connection`` or
    ``Session``, or a Django connection or its alias (mideng.db.django_connection)."""
    # SQLAlchemy's asked first: its classes are at hand, Django's are looked up.
    if not isinstance(conn, _SYNC or _sync()) and is_django_connection(conn):
        return DjangoSite(conn)
    return Site(conn)
