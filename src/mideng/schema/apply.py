"""Applying a plan under the set's lock, and what a store decides at start-up.

``migrate`` is one operation (a generator of statements, run by ``mideng.db``'s loops on any
connection in autocommit mode): take the set's lock, read the set again (another deploy may
have migrated it meanwhile), apply each migration of the plan and add its version row, let go.
On PostgreSQL each change that can be is its own transaction (a lock it needs is bounded by
``lock_timeout``), and a concurrent index build none; MySQL commits each DDL statement by
itself; on SQLite the whole migration is the lock's one transaction. A change is idempotent,
so a migration cut short anywhere (a killed deploy, a lost connection) is finished by running
it again; its version row is added only once all its changes are in.

``needed`` is the start-up rule: a fresh set is created, a current one used, a newer one
refused (naming the release to install), an older one upgraded only where automatic upgrade is
on, and otherwise refused, naming the command that upgrades it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mideng.db.caller_connection import execute_for
from mideng.db.dialect import kind_of
from mideng.db.drive import drive
from mideng.db.statements import Op, Sql, Stmt, T
from mideng.errors import SchemaVersionError
from mideng.schema.lock import acquire, release
from mideng.schema.migrations import CURRENT, Migration
from mideng.schema.plan import Plan, plan, refuse_newer
from mideng.schema.tables import RECORDS, TableSet, family_of
from mideng.schema.versions import Found, forget, stamp, survey
from mideng.schema.versions import ddl as version_table
from mideng.version import __version__

#: Seconds a migration waits for another migration of the same set to finish.
LOCK_WAIT = 600.0
#: Seconds a change may wait for a table lock: writers queue behind a DDL that waits for one.
LOCK_TIMEOUT = 10.0


class Need(enum.Enum):
    NOTHING = "nothing"
    CREATE = "create"
    UPGRADE = "upgrade"


def needed(found: Found, *, auto_upgrade: bool, create: bool, command: str) -> Need:
    """What start-up does with what it found; SchemaVersionError where it must not go on."""
    refuse_newer(found)
    what = found.tables.what
    if found.fresh:
        if not create:
            raise SchemaVersionError(f"the {what} does not exist: run `{command}` to create it")
        return Need.CREATE
    if found.version == CURRENT:
        return Need.NOTHING
    if not auto_upgrade:
        at = (
            "was made before schema versions"
            if found.version == 0
            else f"is at schema version {found.version}"
        )
        raise SchemaVersionError(
            f"the {what} {at} and this mideng ({__version__}) needs version {CURRENT}: run "
            f"`{command}` first (or switch auto_upgrade on to upgrade it at start-up)"
        )
    return Need.UPGRADE


@dataclass(frozen=True)
class Applied:
    """What a migration did: the plan it worked out under the lock and carried out."""

    plan: Plan


def migrate(
    family: str,
    tables: TableSet,
    target: int | None = None,
    *,
    wait: float = LOCK_WAIT,
    lock_timeout: float = LOCK_TIMEOUT,
    waiting: Callable[[], None] | None = None,
) -> Op[Applied]:
    """Take ``tables`` to ``target`` (default: the current version), on a connection of its
    own (its session's timeouts change) that is closed afterwards."""
    yield from _session(family, lock_timeout)

    def carried_out(found: Found) -> Op[Applied]:
        todo = plan(family, found, target)
        yield from _carry_out(todo, lock_timeout)
        return Applied(todo)

    return (yield from _locked(family, tables, carried_out, wait, waiting))


def _locked(
    family: str,
    tables: TableSet,
    work: Callable[[Found], Op[T]],
    wait: float,
    waiting: Callable[[], None] | None,
) -> Op[T]:
    """``work`` on what the set is once its lock is held: what was read before taking it
    may have been a migration of another process half done."""
    yield from acquire(family, tables, wait, waiting)
    try:
        found = yield from survey(family, tables)
        done = yield from work(found)
    except Exception:
        yield from _quietly(_abort(family, tables))
        raise
    yield from release(family, tables)
    return done


def _carry_out(todo: Plan, lock_timeout: float) -> Op[None]:
    if todo.empty:
        return
    yield from _prepare(todo.family, todo.found)
    for step in todo.migrations:
        yield from _apply(todo, step, lock_timeout)


def _session(family: str, lock_timeout: float) -> Op[None]:
    # An index built on a large table takes as long as it takes. What is bounded is a wait for
    # a table lock, since writers queue behind a DDL statement that waits for one: on
    # PostgreSQL per change (a concurrent build waits for older transactions, holding no one
    # up, so its waits are not bounded), on MySQL the metadata lock ALTER TABLE takes for a
    # moment at its start and its end.
    if family == "postgresql":
        yield Stmt(Sql("SET statement_timeout = 0"))
        yield Stmt(Sql("SET lock_timeout = 0"))
    elif family == "mysql":
        seconds = max(1, round(lock_timeout))
        # MariaDB runs the /*M! … */ part, MySQL skips it.
        yield Stmt(
            Sql(f"SET SESSION lock_wait_timeout = {seconds} /*M!100100 , max_statement_time = 0 */")
        )


def _prepare(family: str, found: Found) -> Op[None]:
    if not found.versioned:
        text = Stmt(Sql(version_table(family)))
        if family == "postgresql":
            # Two sets migrating at once (different locks) may both create the version table;
            # PostgreSQL's catalog does not make CREATE TABLE IF NOT EXISTS safe against that.
            yield Stmt(_BEGIN)
            yield Stmt(_VERSION_TABLE_LOCK, {"key": _VERSION_TABLE_KEY})
            yield text
            yield Stmt(_COMMIT)
        else:
            yield text
    if found.stale:
        yield from forget(found.tables)


def _apply(todo: Plan, step: Migration, lock_timeout: float) -> Op[None]:
    family, fresh = todo.family, todo.fresh
    for change in todo.changes(step):
        if family != "postgresql" or change.outside_transaction(fresh):
            yield from change.apply(fresh)
            continue
        yield Stmt(_BEGIN)
        yield Stmt(Sql(f"SET LOCAL lock_timeout = {max(1, round(lock_timeout * 1000))}"))
        yield from change.apply(fresh)
        yield Stmt(_COMMIT)
    yield from stamp(family, todo.found.tables, step.version, step.title)


def _abort(family: str, tables: TableSet) -> Op[None]:
    if family != "mysql":
        yield Stmt(_ROLLBACK)
    if family != "sqlite":
        yield from release(family, tables)


def _quietly(op: Op[None]) -> Op[None]:
    """Clean-up after a failure: a statement that fails too ends it (the connection is then
    beyond use, and closing it lets go of the lock)."""
    try:
        stmt = next(op)
        while True:
            try:
                res = yield stmt
            except Exception:
                return
            stmt = op.send(res)
    except StopIteration:
        return


def ensure(
    family: str,
    tables: TableSet,
    *,
    auto_upgrade: bool,
    command: str,
    own_connection: bool = True,
) -> Op[Need]:
    """The start-up rule as one operation: what it found, and did. A set at this version costs
    the read alone; anything else is decided again under the set's lock, where a set read half
    migrated by another process is seen whole. ``own_connection``: False on a connection that
    goes back to a pool; it then creates a fresh set (quick statements, no session change) but
    leaves an upgrade to the caller, answering UPGRADE."""
    found = yield from survey(family, tables)
    refuse_newer(found)
    if not found.fresh and found.version == CURRENT:
        return Need.NOTHING
    if own_connection:
        yield from _session(family, LOCK_TIMEOUT)

    def settled(found: Found) -> Op[Need]:
        need = needed(found, auto_upgrade=auto_upgrade, create=True, command=command)
        if need is not Need.UPGRADE or own_connection:
            yield from _carry_out(plan(family, found), LOCK_TIMEOUT)
        return need

    return (yield from _locked(family, tables, settled, LOCK_WAIT, None))


def check(family: str, tables: TableSet, *, command: str) -> Op[None]:
    """The start-up rule of what creates nothing (a store told not to, the relay): the tables
    must be there, at this version."""
    found = yield from survey(family, tables)
    needed(found, auto_upgrade=False, create=False, command=command)


def command(url: str, tables: TableSet) -> str:
    """The ``mideng migrate`` command that takes ``tables`` at ``url`` to this version."""
    option = "--table" if tables.component == RECORDS else "--outbox"
    return f"mideng migrate --db {_redacted(url)} {option} {tables.name}"


def _redacted(url: str) -> str:
    return re.sub(r"(//[^:/@]*):[^@/]*@", r"\1:***@", url)


def database_url(url: Any) -> str:
    """A SQLAlchemy URL as ``mideng migrate --db`` takes it: no driver (an async one would not
    do), no password."""
    plain = url.set(drivername=url.get_backend_name())
    return str(plain.render_as_string(hide_password=True))


def on_connection(connection: Any, make: Callable[[str], Op[T]]) -> T:
    """Run ``make(family)`` on a SQLAlchemy ``Connection`` switched to autocommit (the
    operation begins and ends its own transactions)."""
    connection.execution_options(isolation_level="AUTOCOMMIT")
    kind = kind_of(connection.dialect)
    return drive(make(family_of(kind)), execute_for(kind), connection)


def on_engine(engine: Any, make: Callable[[str], Op[T]]) -> T:
    """``on_connection`` on a connection of ``engine``'s that is closed afterwards: a migration
    changes its session's timeouts, which no later user of the pool expects."""
    with engine.connect() as connection:
        try:
            return on_connection(connection, make)
        finally:
            connection.invalidate()


_BEGIN, _COMMIT, _ROLLBACK = Sql("BEGIN"), Sql("COMMIT"), Sql("ROLLBACK")
_VERSION_TABLE_LOCK = Sql("SELECT pg_advisory_xact_lock(:key)")
_VERSION_TABLE_KEY = 0x6D6964656E67  # "mideng"
