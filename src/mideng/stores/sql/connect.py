"""How the SQL store reaches its database: URLs, drivers, timeouts, error mapping.

Shared by the sync and the async side, so both connect with the same settings and report the
same failures the same way.
"""

from __future__ import annotations

import math
from typing import Any

from mideng.db.statements import check_table
from mideng.errors import ConfigurationError, StoreUnavailableError
from mideng.stores.registry import require

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


def family_of(url: str) -> str:
    scheme = url.split("://", 1)[0].lower()
    family = SCHEMES.get(scheme)
    if family is None:
        raise ConfigurationError(f"SQLStore speaks {', '.join(sorted(SCHEMES))}; got {scheme!r}")
    return family


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
        # What a driver raises for the database's refusals and lost connections; the async
        # side's driver adds its own when its first engine is made (asyncmy's errors share
        # no base with PyMySQL's).
        self.driver_errors: tuple[type[BaseException], ...] = (
            self.dbapi.Error,
            OSError,
            TimeoutError,
        )
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

    def make_engine(self) -> Any:
        """The sync SQLAlchemy engine."""
        from sqlalchemy import create_engine

        return create_engine(
            self.sqlalchemy_url(), connect_args=self.connect_args(), **self.engine_options
        )

    def make_migration_engine(self) -> Any:
        """A sync engine for a schema migration: its one connection carries none of the store's
        statement timeouts (an index built on a large table takes minutes) and is closed after
        (mideng.schema.apply.on_engine)."""
        from sqlalchemy import create_engine
        from sqlalchemy.pool import NullPool

        args: dict[str, Any] = {"connect_timeout": max(1, math.ceil(self.connect_timeout))}
        if self.family == "mysql":
            args["connect_timeout"] = self.connect_timeout
        args.update(self.extra_connect_args)
        return create_engine(self.sqlalchemy_url(), connect_args=args, poolclass=NullPool)

    def make_async_engine(self) -> Any:
        """An async SQLAlchemy engine (one per event loop: its connections belong to it)."""
        require("greenlet", self.family)
        module = MODULES[self.family][1]
        require(module, self.family)
        if module == "asyncmy":
            error = require("asyncmy.errors", self.family).Error
            if error not in self.driver_errors:
                self.driver_errors = (*self.driver_errors, error)
        from sqlalchemy.ext.asyncio import create_async_engine

        return create_async_engine(
            self.sqlalchemy_url(asynchronous=True),
            connect_args=self.connect_args(asynchronous=True),
            **self.engine_options,
        )

    def is_db_error(self, exc: BaseException) -> bool:
        from sqlalchemy.exc import SQLAlchemyError

        return isinstance(exc, (*self.driver_errors, SQLAlchemyError))

    def unavailable(self, exc: BaseException) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"{self.family} store {self.table} failed: {type(exc).__name__}: {exc}"
        )
