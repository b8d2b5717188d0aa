"""PostgreSQL and MySQL/MariaDB store over SQLAlchemy 2 Core's engines and pools.

``open_store("postgresql://user@host/db")`` or ``open_store("mysql://user@host/db")``. The
sync side runs on psycopg 3 / PyMySQL, the async side on psycopg's async connection / asyncmy,
each through its own SQLAlchemy engine (the async one made on first use, one per event loop).
Statements go to the pooled DB-API connection directly: SQLAlchemy's execution layer would cost
more than the round trip it wraps. Every operation is one generator in ``sql_ops``, driven here
and in ``sql_async``.

Timeouts make a hung database fail fast: ``connect_timeout`` for new connections,
``statement_timeout`` for any statement (PostgreSQL ``statement_timeout``; MariaDB
``max_statement_time`` and the InnoDB lock wait; PyMySQL's socket timeouts as a backstop),
``pool_timeout`` for a checkout from a full pool. Failures become StoreUnavailableError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from mideng.core.record import Claim, ClaimRequest, Record, Ticket
from mideng.errors import ConfigurationError, IdempotencyError
from mideng.stores import sql_ops as ops
from mideng.stores.sql_async import AsyncSide
from mideng.stores.sql_dialect import Statements
from mideng.stores.sql_engine import (
    DEADLOCK_RETRIES,
    EngineConfig,
    HeldClaims,
    Process,
    cursor_of,
    drive,
    execute,
    execute_psycopg,
    kept_limits,
    schema_op,
)
from mideng.stores.sql_kept import Kept
from mideng.stores.sql_schema import DEFAULT_TABLE, script

T = TypeVar("T")
_NUMBERS: dict[str, Callable[[str], Any]] = {
    "pool_size": int,
    "max_overflow": int,
    "pool_timeout": float,
    "connect_timeout": float,
    "statement_timeout": float,
}
_FLAGS = ("create_schema", "returning", "pool_pre_ping", "read_first")


def _close(held: tuple[Any, Any]) -> None:
    held[0].close()  # back to SQLAlchemy's pool


class SQLStore(AsyncSide):
    """The record table in PostgreSQL or MySQL/MariaDB.

    ``table``: the record table's name. ``pool_size`` / ``max_overflow`` / ``pool_timeout``:
    each engine's pool (size it for the threads, or concurrent tasks, that use the store).
    ``connect_timeout`` / ``statement_timeout``: seconds. ``create_schema``: create the table
    on open. ``returning``: False makes MariaDB use the MySQL 8 statements. ``purge_batch``:
    rows deleted per statement by ``purge``. ``read_first``: the claim's order, True (a
    duplicate costs one read) or False (a new key costs one insert); None, the default, learns
    it per scope from what recent claims found (see ``sql_ops.Habit``).
    """

    def __init__(
        self,
        url: str,
        *,
        table: str = DEFAULT_TABLE,
        pool_size: int = 5,
        max_overflow: int = 10,
        pool_timeout: float = 5.0,
        connect_timeout: float = 5.0,
        statement_timeout: float = 5.0,
        create_schema: bool = True,
        returning: bool | None = None,
        pool_pre_ping: bool = False,
        purge_batch: int = 1000,
        connect_args: dict[str, Any] | None = None,
        read_first: bool | None = None,
    ) -> None:
        self.config = EngineConfig(
            url,
            table=table,
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_timeout=pool_timeout,
            connect_timeout=connect_timeout,
            statement_timeout=statement_timeout,
            returning=returning,
            pool_pre_ping=pool_pre_ping,
            connect_args=connect_args,
        )
        self.url = url
        self.table = self.config.table
        self.family = self.config.family
        if purge_batch < 1:
            raise ConfigurationError(f"purge_batch must be >= 1: {purge_batch!r}")
        self.purge_batch = purge_batch
        self.held = HeldClaims()
        self._engine: Any = None
        self._stmts: Statements | None = None
        self.kept = Kept(*kept_limits(self.config))  # connections kept between operations
        self._binary = self.family == "postgresql"  # psycopg: binary results
        self._execute = execute_psycopg if self._binary else execute
        self.habit = ops.Habit(read_first)
        self._pid = Process.pid
        super().__init__()
        if create_schema:
            self.create_schema()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLStore:
        """Options may also ride in the URL query (``?table=records&pool_size=20``)."""
        base, _, query = url.partition("?")
        rest = []
        for name, value in parse_qsl(query, keep_blank_values=True):
            if name in _NUMBERS:
                options.setdefault(name, _NUMBERS[name](value))
            elif name in _FLAGS:
                options.setdefault(name, value.lower() in ("1", "true", "yes", "on"))
            elif name == "table":
                options.setdefault("table", value)
            else:
                rest.append(f"{name}={value}")
        return cls(base + ("?" + "&".join(rest) if rest else ""), **options)

    @property
    def engine(self) -> Any:
        """The sync SQLAlchemy engine (created on first use; new after a fork)."""
        if self._engine is not None and self._pid == Process.pid:
            return self._engine
        if self._engine is not None:
            # A forked child must not talk over its parent's sockets: drop them unclosed.
            self.kept = Kept(*kept_limits(self.config))
            self._engine.dispose(close=False)
            self._forget_async_engines()
            self._pid = Process.pid
        from sqlalchemy import create_engine

        cfg = self.config
        self._engine = create_engine(
            cfg.sqlalchemy_url(), connect_args=cfg.connect_args(), **cfg.engine_options
        )
        return self._engine

    def _run(self, op: Callable[..., ops.Op[T]], *args: Any) -> T:
        value: T = self._with(self._driven, op, *args)
        return value

    def _driven(self, stmts: Statements, cur: Any, op: Callable[..., ops.Op[T]], *args: Any) -> T:
        return drive(op(stmts, *args), self._execute, cur)

    def _claim_read_first(self, stmts: Statements, cur: Any, req: ClaimRequest) -> Claim:
        # The read that starts the claim decides most duplicates (a replay, a refusal): done
        # here without the operation's generator, which costs more Python than the read's own
        # client side. Anything that must write continues in ops.claim.
        select = stmts.select  # binds: scope, key
        if self._binary:
            cur.execute(select.positional, (req.scope, req.key), binary=True)
        else:
            cur.execute(select.positional, (req.scope, req.key))
        seen = ops.seen(stmts, cur.fetchone(), req, self._binary)
        answer = ops.standing(req, seen)
        if answer is not None:
            return answer
        return drive(ops.claim(stmts, req, seen), self._execute, cur)

    def _claim_insert_first(self, stmts: Statements, cur: Any, req: ClaimRequest) -> Claim:
        # A new key is one insert, done here without the generator as well. A key the insert
        # finds taken goes on in ops.claim reading first, as the generator itself would.
        req = ops.clipped(req)
        insert = ops.insert(stmts, req)
        made = ops.inserted(stmts, req, insert, self._execute(cur, insert))
        if made is not None:
            return made
        return drive(ops.claim(stmts, req), self._execute, cur)

    def _checkout(self) -> tuple[Any, Any]:
        fairy = self.engine.raw_connection()
        return fairy, cursor_of(fairy)

    def _with(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(statements, cursor, *args)`` on a kept connection, failures mapped. Connections
        are kept with their cursor, as (pooled connection, cursor)."""
        if self._pid != Process.pid or self._engine is None:
            self.engine  # noqa: B018 (made on first use, remade in a forked child)
        attempt = 0
        while True:
            kept = self.kept
            try:
                held = kept.take(self._checkout)
            except Exception as exc:  # refused, auth, pool exhausted: all "unavailable"
                raise self.config.unavailable(exc) from exc
            stmts = self._stmts
            if stmts is None:
                stmts = self._stmts = self.config.statements(self.engine.dialect)
            try:
                value = fn(stmts, held[1], *args)
            except IdempotencyError:
                kept.give(held, _close)  # the operation's own answer (a lost lease)
                raise
            except BaseException as exc:
                # Whatever state the connection is in (mid-transaction, half-read), drop it.
                kept.drop()
                held[0].invalidate()
                cfg = self.config
                if not cfg.is_db_error(exc):
                    raise
                if cfg.retryable(exc) and attempt < DEADLOCK_RETRIES:
                    attempt += 1
                    continue
                raise cfg.unavailable(exc) from exc
            kept.give(held, _close)
            return value

    # -- schema -------------------------------------------------------------------------------
    def schema_sql(self) -> str:
        """The DDL for this store's database and table, as text."""
        return script(self.family, self.table)

    def create_schema(self) -> None:
        """Create the table and indexes if missing; safe from many processes at once."""
        self._run(lambda s: schema_op(self.family, self.table))

    # -- the protocol -------------------------------------------------------------------------
    def claim(self, req: ClaimRequest) -> Claim:
        habit = self.habit
        if habit.read_first(req.scope):
            claim = self._with(self._claim_read_first, req)
        else:
            claim = self._with(self._claim_insert_first, req)
        habit.saw(req.scope, claim)
        return self.held.keep(claim)

    def complete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Record:
        return self._run(ops.complete, ticket, result, codec, ttl, self.held.pop(ticket))

    def fail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        return self._run(ops.fail, ticket, error, ttl, self.held.pop(ticket))

    def release(self, ticket: Ticket) -> None:
        self.held.pop(ticket)
        self._run(ops.release, ticket)

    def heartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        return self._run(ops.heartbeat, ticket, lease, ttl, self.held.get(ticket))

    def get(self, scope: str, key: str) -> Record | None:
        return self._run(ops.get, scope, key)

    def forget(self, scope: str, key: str) -> bool:
        return self._run(ops.forget, scope, key)

    def resolve(
        self,
        scope: str,
        key: str,
        *,
        result: bytes | None,
        codec: str | None,
        failed: bool,
        ttl: float | None,
    ) -> Record:
        return self._run(ops.resolve, scope, key, result, codec, failed, ttl)

    def unresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return self._run(ops.unresolved, scope, limit)

    def purge(self, limit: int | None = None) -> int:
        return self._run(ops.purge, limit, self.purge_batch)

    def put_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        self._run(ops.put_token, scope, key, token, ttl)

    def take_token(self, scope: str, key: str, token: str) -> bool:
        return self._run(ops.take_token, scope, key, token)

    def hit(self, scope: str, key: str, window: float, limit: int) -> float | None:
        return self._run(ops.hit, scope, key, window, limit)

    def close(self) -> None:
        self._close_async_engines()
        free = self.kept.clear()
        if self._engine is not None:
            engine, self._engine = self._engine, None
            if self._pid == Process.pid:
                for fairy, _ in free:
                    fairy.close()
            engine.dispose(close=self._pid == Process.pid)

    def __repr__(self) -> str:
        return f"SQLStore({self.family}, table={self.table})"
