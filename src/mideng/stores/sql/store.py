"""PostgreSQL and MySQL/MariaDB store over SQLAlchemy 2 Core's engines and pools.

``open_store("postgresql://user@host/db")`` or ``open_store("mysql://user@host/db")``. The
sync side runs on psycopg 3 / PyMySQL, the async side on psycopg's async connection / asyncmy,
each through its own SQLAlchemy engine (the async one made on first use, one per event loop;
see ``execute``). Every operation is one generator in ``stores.record_table.ops``; each method
here names the operation and hands it to the sync or the async executor.

Timeouts make a hung database fail fast: ``connect_timeout`` for new connections,
``statement_timeout`` for any statement (PostgreSQL ``statement_timeout``; MariaDB
``max_statement_time`` and the InnoDB lock wait; PyMySQL's socket timeouts as a backstop),
``pool_timeout`` for a checkout from a full pool. Failures become StoreUnavailableError.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qsl

from mideng.core.audit import AuditEntry, AuditQuery, AuditRow
from mideng.core.event_loop import to_thread
from mideng.core.record import ACQUIRED, Claim, ClaimRequest, Record, Resolution, Ticket
from mideng.db.statements import Op
from mideng.errors import ConfigurationError
from mideng.schema.apply import Applied, Need, command, migrate, on_engine
from mideng.schema.tables import TableSet, records

# The operations, each named as the method that runs it.
from mideng.stores.audit import AuditStore
from mideng.stores.base import Store
from mideng.stores.batch import BatchStore, Completed, Completion, distinct
from mideng.stores.record_table import RecordTable
from mideng.stores.record_table.claims import ClaimOrder, HeldClaims
from mideng.stores.record_table.ops import (
    Place,
    Sweep,
    add_audit,
    audit_rows,
    complete,
    fail,
    forget,
    get,
    heartbeat,
    hit,
    now,
    purge,
    put_token,
    release,
    resolve,
    take_token,
    unresolved,
)
from mideng.stores.record_table.schema import DEFAULT_TABLE, checked, ensured, script
from mideng.stores.record_table.statements import Statements
from mideng.stores.sql.batch import claim_many, complete_many
from mideng.stores.sql.connect import EngineConfig
from mideng.stores.sql.execute import AsyncExecutor, Executor, acomplete_known, complete_known
from mideng.stores.sql.steps import SQLSteps
from mideng.stores.sql.survey import SQLSurvey

_NUMBERS: dict[str, Callable[[str], Any]] = {
    "pool_size": int,
    "max_overflow": int,
    "pool_timeout": float,
    "connect_timeout": float,
    "statement_timeout": float,
}
_FLAGS = ("create_schema", "auto_upgrade", "returning", "pool_pre_ping", "read_first")


class SQLStore(Store, BatchStore, SQLSteps, SQLSurvey, AuditStore):
    """The record table in PostgreSQL or MySQL/MariaDB.

    ``table``: the record table's name. ``pool_size`` / ``max_overflow`` / ``pool_timeout``:
    each engine's pool (size it for the threads, or concurrent tasks, that use the store).
    ``connect_timeout`` / ``statement_timeout``: seconds. ``create_schema``: create the tables
    on open when they are missing (False: only check them, at the first operation).
    ``auto_upgrade``: upgrade tables of an older schema version on open; off, such tables are
    refused, naming the ``mideng migrate`` command that upgrades them. ``returning``: False
    makes MariaDB use the MySQL 8 statements. ``purge_batch``: rows deleted per statement by
    ``purge``. ``read_first``: the claim's order, True (a
    duplicate costs one read) or False (a new key costs one insert); None, the default, learns
    it per scope from what recent claims found (see ``record_table.claims.ClaimOrder``).
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
        auto_upgrade: bool = False,
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
        #: The transactional mode's way in: this store's records are rows of ``table``.
        self.record_table = RecordTable(self.table)
        if purge_batch < 1:
            raise ConfigurationError(f"purge_batch must be >= 1: {purge_batch!r}")
        self.purge_batch = purge_batch
        #: Where the next ``purge`` resumes its walk of the expiry index.
        self.sweep: Sweep[Place] = Sweep()
        self.older_sweep: Sweep[tuple[str, str]] = Sweep()
        self.held = HeldClaims()
        self.claim_order = ClaimOrder(read_first)
        #: The set of tables the store keeps (mideng.schema): the record and steps tables.
        self.tables: TableSet = records(self.table)
        self.auto_upgrade = auto_upgrade
        self.executor = Executor(self.config)
        self.aexecutor = AsyncExecutor(self.config)
        if create_schema:
            try:
                self.create_schema()
            except BaseException:
                self.close()  # the connection it used goes with the store nobody will close
                raise
        else:
            # Checked once, when the first operation gets its connection.
            self.executor.first = self.aexecutor.first = self._checked

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
        return self.executor.engine

    # -- schema (mideng.schema) ---------------------------------------------------------------
    def schema_sql(self) -> str:
        """The DDL that gives a database without them this store's tables, as text."""
        return script(self.family, self.table)

    @property
    def migrate_command(self) -> str:
        """The command that brings this store's tables to this mideng's schema version."""
        return command(self.url, self.tables)

    def create_schema(self) -> None:
        """Create the tables if missing, use them at this version, upgrade an older version
        when ``auto_upgrade`` is on; SchemaVersionError for a version it may not use. Safe
        from many processes at once."""
        command, auto = self.migrate_command, self.auto_upgrade
        # This rule decides more than the first operation's check would (which refuses what
        # it may upgrade): the check stands aside, and again only if this rule fails.
        check, self.executor.first = self.executor.first, None
        try:
            need = self.executor.drive(lambda s: ensured(s.kind, self.table, auto, command))
            if need is Need.UPGRADE:
                self.upgrade()
        except BaseException:
            self.executor.first = check
            raise
        self.aexecutor.first = None

    async def acreate_schema(self) -> None:
        await to_thread(self.create_schema)

    def upgrade(self, target: int | None = None) -> Applied:
        """Migrate the tables to ``target`` (default: this mideng's version), under the
        lock, on a connection of their own without the store's statement timeouts."""
        engine = self.config.make_migration_engine()
        try:
            return on_engine(engine, lambda family: migrate(family, self.tables, target))
        finally:
            engine.dispose()

    def _checked(self, s: Statements) -> Op[None]:
        return checked(s.kind, self.table, self.migrate_command)

    # -- the protocol, sync -------------------------------------------------------------------
    # The claim's own row is kept, so settling it needs no read-back.
    def claim(self, req: ClaimRequest) -> Claim:
        order = self.claim_order
        if order.fixed is not None:  # a pinned order asks nothing of the learned one
            claim = self.executor.claim(req, order.fixed)
        else:
            claim = self.executor.claim(req, order.read_first(req.scope))
            order.saw(req.scope, claim)
        if claim.outcome is ACQUIRED:
            self.held.keep(claim)
        return claim

    def complete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Record:
        known = self.held.pop(ticket)
        if known is not None:
            ex = self.executor
            return ex.run(complete_known, ex.execute, ticket, result, codec, ttl, known, ex.binary)
        return self.executor.drive(complete, Completion(ticket, result, codec, ttl))

    def fail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        return self.executor.drive(fail, ticket, error, ttl, self.held.pop(ticket))

    def release(self, ticket: Ticket) -> None:
        self.held.pop(ticket)
        self.executor.drive(release, ticket)

    def heartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        return self.executor.drive(heartbeat, ticket, lease, ttl, self.held.get(ticket))

    def get(self, scope: str, key: str) -> Record | None:
        return self.executor.drive(get, scope, key)

    def forget(self, scope: str, key: str) -> bool:
        return self.executor.drive(forget, scope, key)

    def resolve(self, scope: str, key: str, how: Resolution) -> Record:
        return self.executor.drive(resolve, scope, key, how)

    def add_audit(self, entry: AuditEntry) -> None:
        self.executor.drive(add_audit, entry)

    def audit_rows(self, query: AuditQuery) -> list[AuditRow]:
        return self.executor.drive(audit_rows, query)

    def unresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return self.executor.drive(unresolved, scope, limit)

    def purge(self, limit: int | None = None) -> int:
        return self.executor.drive(purge, limit, self.purge_batch, self.sweep)

    def now(self) -> float:
        return self.executor.drive(now)

    def put_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        self.executor.drive(put_token, scope, key, token, ttl)

    def take_token(self, scope: str, key: str, token: str) -> bool:
        return self.executor.drive(take_token, scope, key, token)

    def hit(self, scope: str, key: str, window: float, limit: int) -> float | None:
        return self.executor.drive(hit, scope, key, window, limit)

    # -- the protocol, async: the same operations on the running loop's engine ---------------
    async def aclaim(self, req: ClaimRequest) -> Claim:
        order, executor = self.claim_order, self.aexecutor
        first = order.fixed  # a pinned order asks nothing of the learned one
        if first is None:
            first = order.read_first(req.scope)
        if first:
            claim = await executor.run(executor.claim_read_first, req)
        else:
            claim = await executor.run(executor.claim_insert_first, req)
        if order.fixed is None:
            order.saw(req.scope, claim)
        if claim.outcome is ACQUIRED:
            self.held.keep(claim)
        return claim

    async def acomplete(
        self, ticket: Ticket, result: bytes, codec: str, ttl: float | None
    ) -> Record:
        known = self.held.pop(ticket)
        if known is not None:
            ax = self.aexecutor
            return await ax.run(acomplete_known, ax.execute, ticket, result, codec, ttl, known)
        return await self.aexecutor.drive(complete, Completion(ticket, result, codec, ttl))

    async def afail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        return await self.aexecutor.drive(fail, ticket, error, ttl, self.held.pop(ticket))

    async def arelease(self, ticket: Ticket) -> None:
        self.held.pop(ticket)
        await self.aexecutor.drive(release, ticket)

    async def aheartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        known = self.held.get(ticket)
        return await self.aexecutor.drive(heartbeat, ticket, lease, ttl, known)

    async def aget(self, scope: str, key: str) -> Record | None:
        return await self.aexecutor.drive(get, scope, key)

    async def aforget(self, scope: str, key: str) -> bool:
        return await self.aexecutor.drive(forget, scope, key)

    async def aresolve(self, scope: str, key: str, how: Resolution) -> Record:
        return await self.aexecutor.drive(resolve, scope, key, how)

    async def aadd_audit(self, entry: AuditEntry) -> None:
        await self.aexecutor.drive(add_audit, entry)

    async def aaudit_rows(self, query: AuditQuery) -> list[AuditRow]:
        return await self.aexecutor.drive(audit_rows, query)

    async def aunresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return await self.aexecutor.drive(unresolved, scope, limit)

    async def apurge(self, limit: int | None = None) -> int:
        return await self.aexecutor.drive(purge, limit, self.purge_batch, self.sweep)

    async def anow(self) -> float:
        return await self.aexecutor.drive(now)

    async def aput_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        await self.aexecutor.drive(put_token, scope, key, token, ttl)

    async def atake_token(self, scope: str, key: str, token: str) -> bool:
        return await self.aexecutor.drive(take_token, scope, key, token)

    async def ahit(self, scope: str, key: str, window: float, limit: int) -> float | None:
        return await self.aexecutor.drive(hit, scope, key, window, limit)

    # -- batches (mideng.stores.batch): one multi-row claim, completions on one connection ---
    def claim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]:
        distinct(reqs)
        claims = self.executor.drive(claim_many, reqs) if reqs else []
        return [self.held.keep(c) for c in claims]

    def complete_many(self, items: Sequence[Completion]) -> list[Completed]:
        known = [self.held.pop(item.ticket) for item in items]
        return self.executor.drive(complete_many, items, known) if items else []

    async def aclaim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]:
        distinct(reqs)
        claims = await self.aexecutor.drive(claim_many, reqs) if reqs else []
        return [self.held.keep(c) for c in claims]

    async def acomplete_many(self, items: Sequence[Completion]) -> list[Completed]:
        known = [self.held.pop(item.ticket) for item in items]
        return await self.aexecutor.drive(complete_many, items, known) if items else []

    # -- closing ------------------------------------------------------------------------------
    def close(self) -> None:
        self.aexecutor.close()
        self.executor.close()

    async def aclose(self) -> None:
        await self.aexecutor.aclose()
        self.executor.close()

    def __repr__(self) -> str:
        return f"SQLStore({self.family}, table={self.table})"
