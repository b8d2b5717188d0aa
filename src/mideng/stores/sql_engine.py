"""How the SQL store reaches its database: URLs, drivers, timeouts, error mapping.

Shared by the sync and the async side, so both connect with the same settings and report the
same failures the same way.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from typing import Any

from mideng.core.record import ACQUIRED, Claim, Record, Ticket
from mideng.errors import ConfigurationError, StoreUnavailableError
from mideng.stores import sql_ops as ops
from mideng.stores.registry import require
from mideng.stores.sql_dialect import Res, Sql, Statements, Stmt
from mideng.stores.sql_schema import check_table, ddl

# scheme -> family
SCHEMES = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "postgresql+psycopg": "postgresql",
    "mysql": "mysql",
    "mysql+pymysql": "mysql",
    "mariadb": "mysql",
    "mariadb+pymysql": "mysql",
}
# family -> (sync SQLAlchemy driver, async SQLAlchemy driver), (sync module, async module)
DRIVERS = {
    "postgresql": ("postgresql+psycopg", "postgresql+psycopg"),
    "mysql": ("mysql+pymysql", "mysql+asyncmy"),
}
MODULES = {"postgresql": ("psycopg", "psycopg"), "mysql": ("pymysql", "asyncmy")}
DEADLOCK_RETRIES = 3


class Process:
    """This process's id, kept by a fork hook: ``os.getpid()`` is a system call on every use,
    and a store checks for a fork on every operation."""

    pid = os.getpid()

    @classmethod
    def forked(cls) -> None:
        cls.pid = os.getpid()


os.register_at_fork(after_in_child=Process.forked)


def family_of(url: str) -> str:
    scheme = url.split("://", 1)[0].lower()
    family = SCHEMES.get(scheme)
    if family is None:
        raise ConfigurationError(
            f"SQLStore speaks {', '.join(sorted(SCHEMES))}; got {scheme!r} ({url})"
        )
    return family


def kind_of(dialect: Any, returning: bool | None = None) -> str:
    """Statement kind for a connected SQLAlchemy dialect."""
    if dialect.name in ("postgresql", "sqlite"):
        return str(dialect.name)
    version = tuple(dialect.server_version_info or (0,))
    if getattr(dialect, "is_mariadb", False) and version >= (10, 5) and returning is not False:
        return "mariadb"
    return "mysql"


def cursor_of(fairy: Any, cursor_class: type | None = None) -> Any:
    """The pooled connection's own cursor, made once: a new psycopg cursor per statement
    costs a noticeable share of a short read. ``cursor_class``: the driver's default if None."""
    conn = fairy.driver_connection
    kept = fairy.info.get("mideng.cursor")
    if kept is None or kept[0] is not conn:
        cursor = conn.cursor() if cursor_class is None else conn.cursor(cursor_class)
        kept = fairy.info["mideng.cursor"] = (conn, cursor)
    return kept[1]


def execute_psycopg(cur: Any, stmt: Stmt) -> Res:
    """Run one statement on a psycopg cursor (one statement per text; no lastrowid)."""
    sql = stmt.sql
    # Binary results: numbers and bytea arrive without text parsing (the values are the same).
    cur.execute(sql.pyformat, stmt.params, binary=True)
    return Res(cur.rowcount, cur.fetchall() if sql.rows else ())


def execute(cur: Any, stmt: Stmt) -> Res:
    """Run one statement on a psycopg or PyMySQL cursor."""
    cur.execute(stmt.sql.pyformat, stmt.params)
    count = cur.rowcount
    lastrowid = getattr(cur, "lastrowid", None) or 0  # psycopg has none; MySQL stamps
    for _ in range(stmt.sql.sets - 1):
        cur.nextset()
    return Res(count, cur.fetchall() if stmt.sql.rows else (), lastrowid)


def drive(gen: ops.Op[ops.T], run: Callable[[Any, Stmt], Res], conn: Any) -> ops.T:
    stmt = next(gen)
    while True:
        res = run(conn, stmt)
        try:
            stmt = gen.send(res)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


def schema_op(family: str, table: str) -> ops.Op[None]:
    statements = [Stmt(Sql(text)) for text in ddl(family, table)]
    if family == "postgresql":
        # Concurrent CREATE … IF NOT EXISTS can still collide in PostgreSQL's catalog: one
        # creator at a time per table name.
        statements = [
            Stmt(Sql("BEGIN")),
            Stmt(Sql("SELECT pg_advisory_xact_lock(hashtext(:name))"), {"name": f"mideng:{table}"}),
            *statements,
            Stmt(Sql("COMMIT")),
        ]
    for stmt in statements:  # noqa: UP028 - a generator that receives results, not a relay
        yield stmt


def kept_limits(config: EngineConfig) -> tuple[int, int, float]:
    """(capacity, keep, timeout) for the connections a store keeps (see sql_kept). With
    ``pool_pre_ping`` it keeps none idle: every operation goes through the pool, which pings."""
    opts = config.engine_options
    keep = 0 if opts["pool_pre_ping"] else int(opts["pool_size"])
    return int(opts["pool_size"]) + int(opts["max_overflow"]), keep, float(opts["pool_timeout"])


class HeldClaims:
    """The rows of the claims this store handed out that are still open, by ticket.

    A fenced update then needs no read-back to answer with the new row: it follows from the
    claim's row and the clock the update stamped. A ticket from elsewhere simply misses and
    the row is read. Bounded, so claims that are never settled can't grow it without end.
    """

    LIMIT = 65536

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str, str, int], Record] = {}
        self._lock = threading.Lock()

    def keep(self, claim: Claim) -> Claim:
        """Keep an acquired claim's row; duplicates hold nothing to settle."""
        if claim.outcome is ACQUIRED:
            r = claim.record
            with self._lock:
                self._rows[(r.scope, r.key, r.owner, r.fence)] = r
                if len(self._rows) > self.LIMIT:
                    del self._rows[next(iter(self._rows))]
        return claim

    def get(self, t: Ticket) -> Record | None:
        return self._rows.get((t.scope, t.key, t.owner, t.fence))

    def pop(self, t: Ticket) -> Record | None:
        with self._lock:
            return self._rows.pop((t.scope, t.key, t.owner, t.fence), None)


class EngineConfig:
    """Everything needed to build either engine; checked once, up front."""

    def __init__(
        self,
        url: str,
        *,
        table: str,
        pool_size: int,
        max_overflow: int,
        pool_timeout: float,
        connect_timeout: float,
        statement_timeout: float,
        returning: bool | None,
        pool_pre_ping: bool,
        connect_args: dict[str, Any] | None,
    ) -> None:
        self.url = url
        self.family = family_of(url)
        self.table = check_table(table)
        for name, value in (
            ("pool_timeout", pool_timeout),
            ("connect_timeout", connect_timeout),
            ("statement_timeout", statement_timeout),
        ):
            if not math.isfinite(value) or value <= 0:
                raise ConfigurationError(f"{name} must be positive seconds: {value!r}")
        if pool_size < 1 or max_overflow < 0:
            raise ConfigurationError("pool_size must be >= 1 and max_overflow >= 0")
        require("sqlalchemy", self.family)
        self.dbapi = require(MODULES[self.family][0], self.family)
        self.statement_timeout = statement_timeout
        self.connect_timeout = connect_timeout
        self.returning = returning
        self.extra_connect_args = dict(connect_args or {})
        self.engine_options: dict[str, Any] = {
            "pool_size": pool_size,
            "max_overflow": max_overflow,
            "pool_timeout": pool_timeout,
            "pool_pre_ping": pool_pre_ping,
            # Every transaction the store opens ends before the connection goes back, so the
            # pool's rollback-on-return would be a wasted round trip (PyMySQL always sends it).
            "pool_reset_on_return": None,
            "isolation_level": "AUTOCOMMIT",
        }

    def sqlalchemy_url(self, *, asynchronous: bool = False) -> Any:
        from sqlalchemy.engine import make_url

        return make_url(self.url).set(drivername=DRIVERS[self.family][int(asynchronous)])

    def connect_args(self, *, asynchronous: bool = False) -> dict[str, Any]:
        timeout = self.statement_timeout
        if self.family == "postgresql":
            args: dict[str, Any] = {
                "connect_timeout": max(1, math.ceil(self.connect_timeout)),
                "options": f"-c statement_timeout={max(1, round(timeout * 1000))}",
            }
        else:
            client = require("pymysql.constants.CLIENT", "mysql")
            # MariaDB runs the /*M! … */ part, MySQL skips it (its lock wait still applies).
            args = {
                "connect_timeout": self.connect_timeout,
                "autocommit": True,
                "client_flag": client.MULTI_STATEMENTS | client.FOUND_ROWS,
                "init_command": f"SET SESSION innodb_lock_wait_timeout = "
                f"{max(1, math.ceil(timeout))} "
                f"/*M!100100 , max_statement_time = {timeout:g} */",
            }
            # The client's own read timeout is a backstop for a server that stops answering.
            args["read_timeout"] = timeout + 1.0
            if not asynchronous:
                args["write_timeout"] = timeout + 1.0
        args.update(self.extra_connect_args)
        return args

    def statements(self, dialect: Any) -> Statements:
        return Statements(kind_of(dialect, self.returning), self.table)

    def is_db_error(self, exc: BaseException) -> bool:
        from sqlalchemy.exc import SQLAlchemyError

        return isinstance(exc, (self.dbapi.Error, SQLAlchemyError, OSError, TimeoutError))

    @staticmethod
    def retryable(exc: BaseException) -> bool:
        """A deadlock or serialization failure: nothing changed; running again is safe."""
        if getattr(exc, "sqlstate", None) in ("40P01", "40001"):
            return True
        args: tuple[Any, ...] = getattr(exc, "args", ())
        return bool(args) and args[0] == 1213

    def unavailable(self, exc: BaseException) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"{self.family} store {self.table} failed: {type(exc).__name__}: {exc}"
        )
