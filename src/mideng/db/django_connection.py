"""Where an operation runs inside a Django project's transaction: its database connection.

``DjangoSite`` takes a Django connection (``django.db.connections[alias]``, or the alias
itself) and runs mideng's statements on its cursor, so they join whatever ``transaction.atomic()``
block is open on it. The rules are mideng.db.rules', as for a SQLAlchemy site:

- outside any atomic block (Django's autocommit): the site enters one of its own and commits
  or rolls it back itself;
- inside one and ``savepoint=True``: the site's work is a nested ``atomic()`` (a savepoint),
  so undoing it leaves the caller's block usable, and it stacks with the caller's own nested
  blocks as Django's do: rolling back an inner block removes only its rows;
- inside one and ``savepoint=False``: no extra round trips; ``rollback(whole=True)`` marks the
  caller's block for rollback (``transaction.set_rollback``), since only the block that
  opened a transaction may end it in Django.

The statement kind comes from ``connection.vendor`` (and, for MySQL, whether the server is
MariaDB 10.5+); statements are sent in their ``%s`` form, which Django's cursor takes on every
backend. Django connections are per thread and blocking: an async view calls the code that
uses them through ``asgiref.sync.sync_to_async`` (thread-sensitive, Django's default), as it
does the ORM; there is no async twin.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from mideng.db.dialect import is_mysql, kind_named
from mideng.db.drive import drive
from mideng.db.rules import BlockingSite
from mideng.db.statements import Op, Res, Stmt, T
from mideng.errors import ConfigurationError


def is_django_connection(conn: Any) -> bool:
    """Whether ``conn`` names a Django connection: the connection itself, ``django.db``'s
    ``connection`` (a proxy of the default one), or an alias. Django is not imported for it:
    a program that has not imported it holds none of its connections."""
    if isinstance(conn, str):
        return True
    if "django.db" not in sys.modules:
        return False
    return isinstance(conn, (_DJANGO or _django()).classes)


class _Django(NamedTuple):
    """What of Django's this module looks up per call."""

    classes: tuple[type, type]  # a connection, and django.db.connection's proxy of one
    connections: Any  # django.db.connections


# Imported on first use (once Django is) and kept: an import statement costs more than the
# rest of finding a call's connection.
_DJANGO: _Django | None = None


def _django() -> _Django:
    global _DJANGO
    if _DJANGO is None:
        from django.db import connections
        from django.db.backends.base.base import BaseDatabaseWrapper
        from django.utils.connection import ConnectionProxy

        _DJANGO = _Django((BaseDatabaseWrapper, ConnectionProxy), connections)
    return _DJANGO


class _Undone(Exception):
    """What an atomic block the site entered is told it ends with, to roll it back."""


class _Block:
    """An ``atomic()`` block the site entered itself: the outermost one (a transaction) when
    none was open, else a nested one (a savepoint). Ended by the site's commit or rollback
    rather than by a ``with`` statement, since those come at different calls; Django's own
    exit does the ending, including a failed commit's rollback."""

    __slots__ = ("atomic", "is_active")

    def __init__(self, alias: str) -> None:
        from django.db import transaction

        self.atomic = transaction.atomic(using=alias)
        self.atomic.__enter__()
        self.is_active = True

    def commit(self) -> None:
        self.is_active = False
        self.atomic.__exit__(None, None, None)

    def rollback(self) -> None:
        self.is_active = False
        self.atomic.__exit__(_Undone, _Undone(), None)


def _res(cursor: Any, stmt: Stmt, mysql: bool) -> Res:
    sql = stmt.sql
    params = stmt.params or {}
    cursor.execute(sql.positional, [params[name] for name in sql.names])
    count = cursor.rowcount  # of the first statement: read before moving on to the last
    lastrowid = (cursor.lastrowid or 0) if mysql else 0  # MySQL's stamp; elsewhere nothing
    for _ in range(sql.sets - 1):
        cursor.nextset()
    return Res(count, cursor.fetchall() if sql.rows else (), lastrowid)


def _execute(cursor: Any, stmt: Stmt) -> Res:
    return _res(cursor, stmt, False)


def _execute_mysql(cursor: Any, stmt: Stmt) -> Res:
    return _res(cursor, stmt, True)


def django_kind(connection: Any, *, connected: bool = True) -> str:
    """The statement kind of a Django connection. ``connected=False``: without connecting, so
    MariaDB is taken for MySQL (whose statements it also runs), as an unconnected SQLAlchemy
    engine's dialect is."""
    vendor = str(connection.vendor)
    if vendor != "mysql" or not connected:
        return kind_named(vendor, (0,), False)
    return kind_named(vendor, tuple(connection.mysql_version), connection.mysql_is_mariadb)


# The SQLAlchemy dialects Django's connections compile with, one per database and version.
_DIALECTS: dict[tuple[str, tuple[int, ...], bool], Any] = {}


def django_dialect(connection: Any) -> Any:
    """A SQLAlchemy dialect for SQL a Django connection runs: set up as a connected engine's
    would be for that server (its version; MariaDB's ``RETURNING``), but never connected
    itself. It only compiles Core constructs (mideng.state's statements); Django's cursor
    sends them. One per vendor and server version, kept, so statements compiled for it are
    kept with it."""
    vendor = str(connection.vendor)
    version: tuple[int, ...] = ()
    mariadb = False
    if vendor == "postgresql":
        number = int(connection.pg_version)  # 160004: 16.4
        version = (number // 10000, number % 10000)
    elif vendor == "mysql":
        version = tuple(connection.mysql_version)
        mariadb = bool(connection.mysql_is_mariadb)
    elif vendor == "sqlite":
        version = tuple(connection.Database.sqlite_version_info)  # the sqlite3 module
    else:
        kind_named(vendor, version, mariadb)  # refuses it, by name
    key = (vendor, version, mariadb)
    found = _DIALECTS.get(key)
    if found is None:
        found = _DIALECTS.setdefault(key, _dialect(vendor, version, mariadb))
    return found


def _dialect(vendor: str, version: tuple[int, ...], mariadb: bool) -> Any:
    if vendor == "postgresql":
        from sqlalchemy.dialects.postgresql.base import PGDialect

        dialect: Any = PGDialect()  # type: ignore[no-untyped-call]
    elif vendor == "mysql":
        from sqlalchemy.dialects.mysql.base import MySQLDialect

        dialect = MySQLDialect(is_mariadb=mariadb)
        # As a connected dialect learns it: RETURNING from MariaDB 10.5 on.
        dialect.insert_returning = mariadb and version >= (10, 5)
    else:
        from sqlalchemy.dialects.sqlite.base import SQLiteDialect

        dialect = SQLiteDialect()
        dialect.insert_returning = dialect.update_returning = version >= (3, 35)
    dialect.server_version_info = version
    return dialect


def django_connection(conn: Any) -> Any:
    """The Django connection ``conn`` names, this thread's: the connection itself, or the one
    a proxy or an alias stands for."""
    if not isinstance(conn, str):
        proxy: Any = (_DJANGO or _django()).classes[1]
        if not isinstance(conn, proxy):
            return conn
        conn = conn.alias  # the proxy hands on attributes: this is its connection's
    if not _is_alias(conn):
        raise ConfigurationError(
            f"{conn!r} is not a database alias of this Django project (settings.DATABASES); "
            "a connection is a SQLAlchemy Connection or Session, or a Django connection or "
            "its alias"
        )
    return (_DJANGO or _django()).connections[conn]


def _is_alias(name: str) -> bool:
    """Whether ``name`` is an alias of settings.DATABASES; a ConfigurationError when there is
    no configured Django project to name one in (a URL passed for a connection lands here)."""
    try:
        return name in (_DJANGO or _django()).connections
    except Exception as exc:  # ImportError, ImproperlyConfigured
        raise ConfigurationError(
            f"{name!r}: a string is taken for a Django database alias, and there is no "
            f"configured Django project here ({type(exc).__name__}: {exc}); a connection is a "
            "SQLAlchemy Connection or Session, or a Django connection or its alias"
        ) from exc


class DjangoSite(BlockingSite):
    """A Django connection, or its alias (``"default"``): ``Site``'s interface, blocking."""

    def __init__(self, conn: Any) -> None:
        connection = django_connection(conn)
        # Autocommit is off inside an atomic block and after set_autocommit(False): either way
        # the transaction is the caller's.
        super().__init__(connection, owned=connection.get_autocommit())

    def _block(self) -> _Block:
        return _Block(self.conn.alias)

    def _transaction_call(self) -> Callable[[], Any]:
        return self._block  # an atomic block: the outermost one begins the transaction

    def _savepoint_call(self) -> Callable[[], Any]:
        return self._block  # an atomic block nested in the caller's: a savepoint

    def _callers_rollback(self) -> Callable[[], Any]:
        return self._doom

    def _doom(self) -> None:
        """Only the block that opened a transaction ends it in Django: the caller's atomic
        block is marked to roll back when it exits. A transaction the caller manages by hand
        (``set_autocommit(False)``, no block) is rolled back here."""
        if not self.conn.in_atomic_block:
            self.conn.rollback()
            return
        from django.db import transaction

        transaction.set_rollback(True, using=self.conn.alias)

    def open(self, savepoint: bool, *, atomic: bool = False, left_open: bool = False) -> str:
        """Begin the site's atomic block, as the rules say; the statement kind. ``atomic`` asks
        nothing more of Django: every statement of an atomic block is one transaction.
        ``left_open``: the caller ends the transaction, so there must be one of theirs:
        Django has no transaction that begins by itself and waits for a commit."""
        if left_open and self.owned:
            raise ConfigurationError(
                "this writes into the caller's transaction and never commits it, and no "
                "transaction.atomic() block is open on this Django connection: its row would "
                "commit on its own, apart from the writes it belongs with; call it inside "
                "transaction.atomic()"
            )
        begin = self._begin(savepoint)
        if begin is not None:
            if not (self.owned or self.conn.in_atomic_block) and self.conn.vendor == "sqlite":
                raise ConfigurationError(
                    "a savepoint in a transaction managed with set_autocommit(False) commits "
                    "on SQLite (Python's sqlite3 ends the transaction at the savepoint, as "
                    "Django's documentation warns): use transaction.atomic(), or savepoint=False"
                )
            self.begun = begin()
        self.connection = self.conn
        self.kind = django_kind(self.conn)
        return self.kind

    def run(self, op: Op[T]) -> T:
        execute = _execute_mysql if is_mysql(self.kind) else _execute
        with self.conn.cursor() as cursor:
            return drive(op, execute, cursor)

    def commit(self) -> None:
        """Commit what the site began (nothing if it began nothing: the caller commits). A
        failed commit is rolled back by Django's own exit of the block."""
        if self.begun is not None:
            self.begun.commit()
