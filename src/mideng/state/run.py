"""Running a primitive on the caller's connection: the only code written twice, sync and async.

With no savepoint, as mideng.db.caller_connection's rules say: inside the caller's open
transaction the statement is one more of theirs (it commits or rolls back with their work, and
a duplicate or a 0-row answer leaves that transaction as it was); with none open (autocommit
use) a site begins one, commits it when the primitive answers and rolls it back when it
raises. A Session
(sync or async) with ``autoflush`` and pending ORM changes is flushed first, as its own
``execute`` would be, so the statement sees those rows; its transaction is then the caller's.

A Django connection (or its alias) is a ``DjangoSite`` (mideng.db.django_connection), by the
same rules: inside the caller's ``transaction.atomic()`` block the statement is one more of
theirs; outside any, the site's own block commits it. Its statements are compiled by the
SQLAlchemy dialect of the connection's database and sent on Django's cursor in their ``%s``
form; rows come back keyed and converted as Django reads a model's columns
(mideng.db.django_models).

A plain Connection inside the caller's transaction is the case where the site has nothing to
decide (nothing to begin, commit or roll back; the connection is the caller's own), so the
operation is driven on it directly, without building one. Statements are sent as
mideng.state.compiled says (``TableSql.driver`` or its typed clause), by ``execute`` and
``aexecute``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from mideng.db.caller_connection import AsyncSite, Site
from mideng.db.django_connection import DjangoSite, django_dialect, is_django_connection
from mideng.db.django_models import model_rows
from mideng.db.drive import adrive, drive
from mideng.db.statements import Op, Res, Stmt, T
from mideng.observability import logs

if TYPE_CHECKING:
    from typing_extensions import TypeVarTuple, Unpack

    Ts = TypeVarTuple("Ts")

#: What a primitive hands the runner: given the connection's dialect (whose speech says which
#: compiled statements it takes, mideng.state.compiled) and whatever else the runner was
#: handed for it, the operation to drive. Handing the call's arguments along, rather than
#: closing over them, spares a call a function object and its cells.
Make = Callable[[Any], Op[T]]


def _pending(session: Any) -> bool:
    return bool(session.new or session.dirty or session.deleted)


def execute(connection: Any, stmt: Stmt) -> Res:
    sql: Any = stmt.sql  # a TableSql: every statement of mideng.state is one
    if sql.driver is None:
        return sql.answer(connection.execute(sql.typed, stmt.params))  # type: ignore[no-any-return]
    return sql.answer(connection.exec_driver_sql(sql.driver, sql.arguments(stmt.params)))  # type: ignore[no-any-return]


async def aexecute(connection: Any, stmt: Stmt) -> Res:
    sql: Any = stmt.sql
    if sql.driver is None:
        return sql.answer(await connection.execute(sql.typed, stmt.params))  # type: ignore[no-any-return]
    return sql.answer(await connection.exec_driver_sql(sql.driver, sql.arguments(stmt.params)))  # type: ignore[no-any-return]


def execute_on_cursor(cursor: Any, stmt: Stmt) -> Res:
    """One statement on a Django cursor: its ``%s`` text and the parameters in that order."""
    sql: Any = stmt.sql
    params = stmt.params or {}
    cursor.execute(sql.positional, [params[name] for name in sql.names])
    if sql.rows:
        rows = model_rows(sql.returned, cursor.fetchall(), cursor.db)
        return Res(len(rows), rows, 0)
    # MySQL's id of the row an INSERT made, for an insert with no RETURNING (MySQL 8).
    return Res(cursor.rowcount, (), (cursor.lastrowid or 0) if sql.stamp else 0)


def _send_on_cursor(site: Any, make: Callable[..., Op[T]], args: tuple[Any, ...]) -> T:
    with site.conn.cursor() as cursor:
        return drive(make(django_dialect(site.conn), *args), execute_on_cursor, cursor)


def _send(site: Any, make: Callable[..., Op[T]], args: tuple[Any, ...]) -> T:
    # Inside: a Session's connection is asked for after its transaction is begun, and a
    # failure to get one must not leave that transaction open in the caller's Session.
    connection = site.connection
    return drive(make(connection.dialect, *args), execute, connection)


def _on_site(
    site: Any,
    send: Callable[[Any, Callable[..., Op[T]], tuple[Any, ...]], T],
    make: Callable[..., Op[T]],
    args: tuple[Any, ...],
) -> T:
    """Open ``site`` (no savepoint), ``send`` the operation on it, commit what the site began;
    on an error roll back the site's own transaction, never the caller's."""
    try:
        site.open(savepoint=False)
        answer = send(site, make, args)
    except BaseException:
        try:
            site.rollback(whole=False)
        except Exception as exc:
            logs.statement_rollback_failed(exc)
        raise
    site.commit()
    return answer


def run(conn: Any, make: Callable[[Any, Unpack[Ts]], Op[T]], *args: Unpack[Ts]) -> T:
    if type(conn) is Connection:
        if conn.in_transaction():
            dialect = conn.dialect
            return drive(make(dialect, *args), execute, conn)
    elif is_django_connection(conn):
        return _on_site(DjangoSite(conn), _send_on_cursor, make, args)
    site = Site(conn)
    if site.session and conn.autoflush and _pending(conn):
        conn.flush()  # as Session.execute does: the statement sees the ORM's pending rows
        site = Site(conn)  # the flush began the session's transaction: now the caller's
    return _on_site(site, _send, make, args)


# The async connection class, imported on first use: sqlalchemy.ext.asyncio is only for
# callers of the async twins.
_ASYNC_CONNECTION: Any = None


def async_connection() -> Any:
    global _ASYNC_CONNECTION
    if _ASYNC_CONNECTION is None:
        from sqlalchemy.ext.asyncio import AsyncConnection

        _ASYNC_CONNECTION = AsyncConnection
    return _ASYNC_CONNECTION


async def arun(conn: Any, make: Callable[[Any, Unpack[Ts]], Op[T]], *args: Unpack[Ts]) -> T:
    if type(conn) is (_ASYNC_CONNECTION or async_connection()) and conn.in_transaction():
        dialect = conn.dialect
        return await adrive(make(dialect, *args), aexecute, conn)
    site = AsyncSite(conn)
    if site.session and conn.sync_session.autoflush and _pending(conn):
        await conn.flush()
        site = AsyncSite(conn)
    try:
        await site.open(savepoint=False)
        connection = site.connection
        dialect = connection.dialect
        answer = await adrive(make(dialect, *args), aexecute, connection)
    except BaseException:
        try:
            await site.rollback(whole=False)
        except Exception as exc:
            logs.statement_rollback_failed(exc)
        raise
    await site.commit()
    return answer
