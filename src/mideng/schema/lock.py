"""One migration of a set of tables at a time: a lock per set, held for the whole migration.

- PostgreSQL: a session advisory lock (a concurrent index is built outside any transaction, so
  the lock can't be a transaction's). It is tried, not waited for: a session waiting inside
  ``pg_advisory_lock`` holds a snapshot, which the holder's concurrent index build waits for
  while the waiter waits for the holder. Between tries the waiter sleeps on the server, in a
  statement that holds no lock.
- MySQL/MariaDB: ``GET_LOCK``, a named session lock, tried the same way (a wait inside it would
  be cut short by a store connection's ``max_statement_time``).
- SQLite: ``BEGIN IMMEDIATE``, the database's one write lock; the whole migration runs in that
  transaction and commits as one.

Whoever waits is told once (``waiting``), then tries again until ``wait`` seconds have passed;
a lock the session still holds when its connection closes is released by the server.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from mideng.db.dialect import lock_timed_out
from mideng.db.statements import Op, Sql, Stmt
from mideng.errors import StoreUnavailableError
from mideng.schema.tables import TableSet

#: Seconds between tries while another migration of the set runs.
PAUSE = 0.1


def name(tables: TableSet) -> str:
    """The lock's name: MySQL allows 64 characters, table names reach 50."""
    digest = hashlib.sha256(f"{tables.component}:{tables.name}".encode()).hexdigest()
    return f"mideng-schema-{digest[:40]}"


def number(tables: TableSet) -> int:
    """The PostgreSQL advisory lock's key: a signed 64-bit number from the name."""
    return int.from_bytes(hashlib.sha256(name(tables).encode()).digest()[:8], "big", signed=True)


def acquire(
    family: str, tables: TableSet, wait: float, waiting: Callable[[], None] | None = None
) -> Op[None]:
    deadline = time.monotonic() + wait
    told = False
    while True:
        if (yield from _try(family, tables)):
            return
        if time.monotonic() >= deadline:
            raise StoreUnavailableError(
                f"another migration of the {tables.what} held its lock for {wait:g} s; "
                "try again when it is done"
            )
        if not told and waiting is not None:
            waiting()
        told = True
        if family != "sqlite":  # SQLite's try waited, for its busy timeout
            yield Stmt(_PAUSE[family], {"seconds": PAUSE})


def release(family: str, tables: TableSet) -> Op[None]:
    if family == "postgresql":
        yield Stmt(_UNLOCK_POSTGRESQL, {"key": number(tables)})
    elif family == "mysql":
        yield Stmt(_UNLOCK_MYSQL, {"name": name(tables)})
    else:
        yield Stmt(_COMMIT)


def _try(family: str, tables: TableSet) -> Op[bool]:
    if family == "postgresql":
        res = yield Stmt(_TRY_POSTGRESQL, {"key": number(tables)})
        return bool(res.rows[0][0])
    if family == "mysql":
        res = yield Stmt(_TRY_MYSQL, {"name": name(tables)})
        return bool(res.rows[0][0] == 1)
    try:
        yield Stmt(_BEGIN_IMMEDIATE)
    except Exception as exc:
        # The driver's error, or SQLAlchemy's around it.
        if lock_timed_out(getattr(exc, "orig", None) or exc):
            return False
        raise
    return True


_PAUSE = {"postgresql": Sql("SELECT pg_sleep(:seconds)"), "mysql": Sql("SELECT SLEEP(:seconds)")}
_TRY_POSTGRESQL = Sql("SELECT pg_try_advisory_lock(:key)")
_UNLOCK_POSTGRESQL = Sql("SELECT pg_advisory_unlock(:key)")
_TRY_MYSQL = Sql("SELECT GET_LOCK(:name, 0)")
_UNLOCK_MYSQL = Sql("SELECT RELEASE_LOCK(:name)")
_BEGIN_IMMEDIATE = Sql("BEGIN IMMEDIATE")
_COMMIT = Sql("COMMIT")
