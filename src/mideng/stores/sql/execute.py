"""How the SQL store runs an operation on its own connections: ``Executor`` (sync) and
``AsyncExecutor`` (one engine per event loop).

Statements go to the pooled DB-API connection's cursor directly: SQLAlchemy's execution layer
would cost more than the round trip it wraps. Each executor takes a cached connection
(``connections``), builds the statements for its dialect once, runs ``fn(statements, cursor,
*args)`` and maps failures: a lost lease (the operation's own answer) keeps the connection; any
other failure drops it, retries a deadlock, and raises StoreUnavailableError for a database
error. ``drive`` runs an ``ops`` generator that way, through mideng.db.drive.

The claim's first statement is sent without its generator (``claim_read_first`` and
``claim_insert_first``, sync and async): most claims end there, and the generator costs more
Python than that statement's own client side. Anything else goes on in ``ops.claim``. So is the
completion of a claim whose row the store kept (``record_table.claims.HeldClaims``;
``complete_known`` and ``acomplete_known``): most first calls end with it, and the fenced
update alone tells the new row (it follows from the claim's row and the clock the update
stamped), so ``ops.complete`` is entered only when the update misses, to read the row for the
error.

Async connections belong to the event loop that opened them, so each loop gets its own
SQLAlchemy async engine, made on first use. A loop that ends (``asyncio.run`` returning, a test
finishing) finalises its async generators before it closes; a small keeper generator per loop
uses that moment to dispose the engine's connections on the loop that owns them.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mideng.core.decide import completed, decide, fresh
from mideng.core.event_loop import running_loop
from mideng.core.process import Process
from mideng.core.record import ACQUIRED, Claim, ClaimRequest, Record, Ticket
from mideng.db.dialect import kind_of, retryable
from mideng.db.drive import AsyncExecute, Execute, adrive, drive
from mideng.db.statements import Op, Stmt, T
from mideng.errors import IdempotencyError
from mideng.stores.batch import Completion
from mideng.stores.record_table.ops import (
    claim as claim_op,
)
from mideng.stores.record_table.ops import (
    claim_params,
    clipped,
    complete,
    complete_params,
    fenced_stamp,
    insert,
    inserted,
)
from mideng.stores.record_table.rows import mysql_current, psycopg_current
from mideng.stores.record_table.schema import REQUEST_ID_MAX
from mideng.stores.record_table.statements import Statements
from mideng.stores.sql.connect import EngineConfig
from mideng.stores.sql.connections import (
    AsyncConnectionCache,
    ConnectionCache,
    cursor_of,
    limits,
)
from mideng.stores.sql.drivers import (
    aexecute_asyncmy,
    aexecute_psycopg,
    execute_dbapi,
    execute_psycopg,
    quiet_cursor,
)

DEADLOCK_RETRIES = 3


def _close(held: tuple[Any, Any]) -> None:
    held[0].close()  # back to SQLAlchemy's pool


class Executor:
    """The store's sync engine (made on first use, remade in a forked child), its connection
    cache and its statements; operations run here one connection at a time."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.cache = ConnectionCache(*limits(config.engine_options))
        self._engine: Any = None
        self._statements: Statements | None = None
        self.binary = config.family == "postgresql"  # psycopg: binary results
        self.execute = execute_psycopg if self.binary else execute_dbapi
        #: The record and clock from the store's own read (``Statements.select``).
        self.current = psycopg_current if self.binary else mysql_current
        self._pid = Process.pid
        #: An operation run once, before the first one (the store's schema check), or None.
        self.first: Callable[[Statements], Op[None]] | None = None

    @property
    def engine(self) -> Any:
        """The SQLAlchemy engine (created on first use; new after a fork)."""
        if self._engine is not None and self._pid == Process.pid:
            return self._engine
        if self._engine is not None:
            # A forked child must not talk over its parent's sockets: drop them unclosed.
            self.cache = ConnectionCache(*limits(self.config.engine_options))
            self._engine.dispose(close=False)
            self._pid = Process.pid
        self._engine = self.config.make_engine()
        return self._engine

    def checkout(self) -> tuple[Any, Any]:
        """A pooled connection and its cursor, kept together."""
        pooled = self.engine.raw_connection()
        return pooled, cursor_of(pooled)

    def _ready(self) -> Statements:
        """The statements, with the engine made on first use and remade in a forked child;
        ``first`` run before the first operation."""
        if self._pid != Process.pid or self._engine is None:
            self.engine  # noqa: B018
        stmts = self._statements
        if stmts is None:
            kind = kind_of(self.engine.dialect, self.config.returning)
            stmts = self._statements = Statements(kind, self.config.table)
            if self.first is not None:
                try:
                    self.drive(self.first)
                except BaseException:
                    self._statements = None  # not passed: the next operation runs it again
                    raise
        return stmts

    def _take(self, cache: ConnectionCache) -> tuple[Any, Any]:
        """A connection when none is idle (an idle one is popped off ``cache.free``, which
        needs no lock: a list's pop is atomic)."""
        try:
            return cache.take(self.checkout)  # type: ignore[no-any-return]
        except Exception as exc:  # refused, auth, pool exhausted: all "unavailable"
            raise self.config.unavailable(exc) from exc

    def _failed(
        self, cache: ConnectionCache, held: tuple[Any, Any], exc: BaseException, attempt: int
    ) -> None:
        """``exc`` was raised on ``held``: raise what the caller gets, or return to retry."""
        if isinstance(exc, IdempotencyError):
            cache.give(held, _close)  # the operation's own answer (a lost lease)
            raise exc
        # Whatever state the connection is in (mid-transaction, half-read), drop it.
        cache.drop()
        held[0].invalidate()
        cfg = self.config
        if not cfg.is_db_error(exc):
            raise exc
        if retryable(exc) and attempt < DEADLOCK_RETRIES:
            return
        raise cfg.unavailable(exc) from exc

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(statements, cursor, *args)`` on a cached connection, failures mapped."""
        stmts = self._statements
        if stmts is None or self._pid != Process.pid:
            stmts = self._ready()
        attempt = 0
        while True:
            cache = self.cache
            try:
                held = cache.free.pop()
            except IndexError:
                held = self._take(cache)
            try:
                value = fn(stmts, held[1], *args)
            except BaseException as exc:
                self._failed(cache, held, exc, attempt)  # raises, unless to retry a deadlock
                attempt += 1
                continue
            cache.give(held, _close)
            return value

    def drive(self, op: Callable[..., Op[T]], *args: Any) -> T:
        """Run the operation ``op(statements, *args)``."""
        value: T = self.run(self._driven, op, *args)
        return value

    def _driven(self, stmts: Statements, cur: Any, op: Callable[..., Op[T]], *args: Any) -> T:
        return drive(op(stmts, *args), self.execute, cur)

    def claim(self, req: ClaimRequest, read_first: bool) -> Claim:
        """A claim in the given order, on a connection as ``run`` gives one."""
        first = self.claim_read_first if read_first else self.claim_insert_first
        return self.run(first, req)

    def claim_read_first(self, stmts: Statements, cur: Any, req: ClaimRequest) -> Claim:
        # A replay or a refusal is decided by the read alone; anything else goes on in ops.claim.
        if self.binary:
            cur.execute(stmts.select.positional, (req.scope, req.key), binary=True)
        else:
            cur.execute(stmts.select.positional, (req.scope, req.key))
        row = cur.fetchone()
        found = None if row is None else self.current(row, req.scope, req.key)
        if found is not None:
            answer, write = decide(found[0], req, found[1])
            if not write:
                return answer
        return drive(claim_op(stmts, req, found), self.execute, cur)

    def claim_insert_first(self, stmts: Statements, cur: Any, req: ClaimRequest) -> Claim:
        # A key the insert finds taken goes on in ops.claim, reading first, as it would itself.
        if req.request_id is not None and len(req.request_id) > REQUEST_ID_MAX:
            req = clipped(req)
        params = claim_params(stmts, req)
        insert = stmts.insert
        assert insert is not None
        if self.binary:
            # psycopg: the insert's RETURNING row is the stamp (no result object to make).
            cur.execute(insert.pyformat, params, binary=True)
            stamp = float(cur.fetchone()[0]) if cur.rowcount == 1 else None
        else:
            stamp = stmts.stamped(self.execute(cur, Stmt(insert, params)), params)
        if stamp is not None:
            return Claim(ACQUIRED, fresh(req, stamp, None))
        return drive(claim_op(stmts, req), self.execute, cur)

    def close(self) -> None:
        free = self.cache.clear()
        if self._engine is not None:
            engine, self._engine = self._engine, None
            if self._pid == Process.pid:
                for pooled, _ in free:
                    pooled.close()
            engine.dispose(close=self._pid == Process.pid)


def complete_known(
    stmts: Statements,
    cur: Any,
    execute: Execute,
    ticket: Ticket,
    result: bytes,
    codec: str,
    ttl: float | None,
    known: Record,
    binary: bool = False,
) -> Record:
    """A kept claim's completion, run by ``Executor.run`` as ``fn(statements, cursor, ...)``;
    ``execute``: that executor's statement runner. ``binary``: a psycopg cursor, sent the
    statement directly (binary results, RETURNING updated_at: the stamp the new row follows
    from) without statement and result objects."""
    params = complete_params(stmts, ticket, result, codec, ttl)
    if binary:
        cur.execute(stmts.complete.pyformat, params, binary=True)
        if cur.rowcount == 1:
            return completed(known, float(cur.fetchone()[0]), result=result, codec=codec, ttl=ttl)
    else:
        res = execute(cur, Stmt(stmts.complete, params))
        if res.rowcount == 1:
            stamp = fenced_stamp(stmts, res, params)
            return completed(known, stamp, result=result, codec=codec, ttl=ttl)
    return drive(complete(stmts, Completion(ticket, result, codec, ttl)), execute, cur)


async def acomplete_known(
    stmts: Statements,
    cur: Any,
    execute: AsyncExecute,
    ticket: Ticket,
    result: bytes,
    codec: str,
    ttl: float | None,
    known: Record,
) -> Record:
    params = complete_params(stmts, ticket, result, codec, ttl)
    res = await execute(cur, Stmt(stmts.complete, params))
    if res.rowcount == 1:
        return completed(
            known, fenced_stamp(stmts, res, params), result=result, codec=codec, ttl=ttl
        )
    return await adrive(complete(stmts, Completion(ticket, result, codec, ttl)), execute, cur)


@dataclass
class _LoopEngine:
    """One event loop's engine, connection cache and statements."""

    engine: Any
    cache: AsyncConnectionCache
    keeper: AsyncGenerator[None, None] | None = None
    statements: Statements | None = None

    async def checkout(self) -> tuple[Any, Any]:
        """A pooled connection and its cursor, kept together (as on the sync side)."""
        pooled = await self.engine.raw_connection()
        quiet = quiet_cursor() if self.engine.dialect.driver == "asyncmy" else None
        return pooled, cursor_of(pooled, quiet)

    async def give(self, held: tuple[Any, Any]) -> None:
        extra = self.cache.give(held)
        if extra is not None:
            from sqlalchemy.util import greenlet_spawn

            # Inside greenlet_spawn: a checkin to a full pool closes the connection, and
            # closing an async connection awaits.
            await greenlet_spawn(extra[0].close)


async def _keep(entry: _LoopEngine) -> AsyncGenerator[None, None]:
    from sqlalchemy.util import greenlet_spawn

    try:
        yield
    finally:
        for pooled, _ in entry.cache.clear():
            await greenlet_spawn(pooled.close)
        await entry.engine.dispose()


class AsyncExecutor:
    """``Executor`` awaited, with one engine per event loop."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.binary = config.family == "postgresql"
        self.execute: AsyncExecute = aexecute_psycopg if self.binary else aexecute_asyncmy
        self.current = psycopg_current if self.binary else mysql_current  # as Executor's
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopEngine] = (
            weakref.WeakKeyDictionary()
        )
        self._pid = Process.pid
        #: As ``Executor.first``: run before the first operation of each event loop's engine.
        self.first: Callable[[Statements], Op[None]] | None = None

    async def loop_engine(self) -> _LoopEngine:
        """The running loop's engine, made on first use."""
        if self._pid != Process.pid:
            self.forget()  # a forked child: the parent's connections are not ours to use
        loop = running_loop()  # every async operation asks: no getpid() system call
        entry = self._loops.get(loop)
        if entry is not None:
            return entry
        cache = AsyncConnectionCache(*limits(self.config.engine_options))
        entry = self._loops[loop] = _LoopEngine(self.config.make_async_engine(), cache)
        entry.keeper = _keep(entry)
        await entry.keeper.__anext__()  # registers it with the loop's asyncgen finaliser
        return entry

    async def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``await fn(statements, cursor, *args)`` on a cached connection, failures mapped."""
        from sqlalchemy.util import greenlet_spawn

        cfg = self.config
        entry = await self.loop_engine()
        cache = entry.cache
        for attempt in range(DEADLOCK_RETRIES + 1):
            try:
                held = await cache.take(entry.checkout)
            except Exception as exc:
                raise cfg.unavailable(exc) from exc
            try:
                if entry.statements is None:
                    entry.statements = await self._prepared(entry, held[1])
                value = await fn(entry.statements, held[1], *args)
            except IdempotencyError:
                await entry.give(held)
                raise
            except BaseException as exc:
                # Cancelled mid-statement or failed: the connection's state is unknown.
                cache.drop()
                await asyncio.shield(greenlet_spawn(held[0].invalidate))
                if not cfg.is_db_error(exc):
                    raise
                if retryable(exc) and attempt < DEADLOCK_RETRIES:
                    continue
                raise cfg.unavailable(exc) from exc
            await entry.give(held)
            return value
        raise AssertionError("unreachable")  # pragma: no cover

    async def _prepared(self, entry: _LoopEngine, cur: Any) -> Statements:
        """A loop engine's statements, once ``first`` has run on its first connection."""
        stmts = Statements(kind_of(entry.engine.dialect, self.config.returning), self.config.table)
        if self.first is not None:
            await adrive(self.first(stmts), self.execute, cur)
        return stmts

    async def drive(self, op: Callable[..., Op[T]], *args: Any) -> T:
        return await self.run(self._driven, op, *args)

    async def _driven(self, stmts: Statements, cur: Any, op: Callable[..., Op[T]], *args: Any) -> T:
        return await adrive(op(stmts, *args), self.execute, cur)

    async def claim_read_first(self, stmts: Statements, cur: Any, req: ClaimRequest) -> Claim:
        if self.binary:
            await cur.execute(stmts.select.positional, (req.scope, req.key), binary=True)
        else:
            await cur.execute(stmts.select.positional, (req.scope, req.key))
        row = await cur.fetchone()
        found = None if row is None else self.current(row, req.scope, req.key)
        if found is not None:
            answer, write = decide(found[0], req, found[1])
            if not write:
                return answer
        return await adrive(claim_op(stmts, req, found), self.execute, cur)

    async def claim_insert_first(self, stmts: Statements, cur: Any, req: ClaimRequest) -> Claim:
        req = clipped(req)
        fresh = insert(stmts, req)
        made = inserted(stmts, req, fresh, await self.execute(cur, fresh))
        if made is not None:
            return made
        return await adrive(claim_op(stmts, req), self.execute, cur)

    def forget(self) -> None:
        """Drop every loop's engine unclosed (a forked child)."""
        self._loops = weakref.WeakKeyDictionary()
        self._pid = Process.pid

    def close(self) -> None:
        """Dispose each loop's engine on its own loop, from sync code."""
        if self._pid != Process.pid:
            self.forget()  # the parent's loops and connections: theirs to close
            return
        entries, self._loops = list(self._loops.items()), weakref.WeakKeyDictionary()
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for loop, entry in entries:
            if entry.keeper is None or loop.is_closed():
                continue
            if loop is current:
                loop.create_task(entry.keeper.aclose())
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(entry.keeper.aclose(), loop).result(10)
            else:
                loop.run_until_complete(entry.keeper.aclose())

    async def aclose(self) -> None:
        """Dispose the running loop's engine here, then the others as ``close`` does."""
        entry = self._loops.pop(asyncio.get_running_loop(), None)
        if entry is not None and entry.keeper is not None:
            await entry.keeper.aclose()
        self.close()
