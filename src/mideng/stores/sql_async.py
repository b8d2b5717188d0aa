"""The SQL store's async side: the same operations, awaited on psycopg async / asyncmy.

Async connections belong to the event loop that opened them, so each loop gets its own
SQLAlchemy async engine, made on first use. A loop that ends (``asyncio.run`` returning, a test
finishing) finalises its async generators before it closes; a small keeper generator per loop
uses that moment to dispose the engine's connections on the loop that owns them.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mideng.core.record import Claim, ClaimRequest, Record, Ticket
from mideng.errors import IdempotencyError
from mideng.stores import sql_ops as ops
from mideng.stores.base import Store
from mideng.stores.registry import require
from mideng.stores.sql_dialect import Res, Statements, Stmt
from mideng.stores.sql_engine import (
    DEADLOCK_RETRIES,
    MODULES,
    EngineConfig,
    HeldClaims,
    cursor_of,
    kept_limits,
    schema_op,
)
from mideng.stores.sql_kept import AKept


async def _execute_psycopg(cur: Any, stmt: Stmt) -> Res:
    await cur.execute(stmt.sql.pyformat, stmt.params, binary=True)  # as execute_psycopg
    return Res(cur.rowcount, await cur.fetchall() if stmt.sql.rows else ())


@functools.cache
def _quiet_cursor() -> type:
    """asyncmy's cursor, minus the warnings it fetches.

    When the server counts a warning, asyncmy's cursor sends SHOW WARNINGS and logs each one at
    WARNING. The claim's INSERT IGNORE warns on every taken key (that is how it says so), so
    every duplicate claim paid a second round trip and a log line; PyMySQL, on the sync side,
    reads the warning count and goes on. ``_show_warnings`` is the hook asyncmy's own result
    handling calls for that (the store's statements admit no other warning; see the insert
    in sql_dialect).
    """
    from asyncmy.cursors import Cursor

    class QuietCursor(Cursor):
        async def _show_warnings(self, conn: Any) -> None:
            return None

    return QuietCursor


async def _execute_asyncmy(cur: Any, stmt: Stmt) -> Res:
    await cur.execute(stmt.sql.pyformat, stmt.params)
    count, lastrowid = cur.rowcount, cur.lastrowid or 0
    for _ in range(stmt.sql.sets - 1):
        await cur.nextset()
    return Res(count, await cur.fetchall() if stmt.sql.rows else (), lastrowid)


async def adrive(
    gen: ops.Op[ops.T], run: Callable[[Any, Stmt], Awaitable[Res]], conn: Any
) -> ops.T:
    stmt = next(gen)
    while True:
        res = await run(conn, stmt)
        try:
            stmt = gen.send(res)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


async def _agive(kept: AKept, held: tuple[Any, Any]) -> None:
    extra = kept.give(held)
    if extra is not None:
        from sqlalchemy.util import greenlet_spawn

        # Inside greenlet_spawn: a checkin to a full pool closes the connection, and closing
        # an async connection awaits.
        await greenlet_spawn(extra[0].close)


@dataclass
class _LoopEngine:
    engine: Any
    keeper: AsyncGenerator[None, None] | None = None
    statements: Statements | None = None
    kept: AKept | None = None  # connections kept between operations (sql_kept)

    async def checkout(self) -> tuple[Any, Any]:
        """A pooled connection and its cursor, kept together (as on the sync side)."""
        fairy = await self.engine.raw_connection()
        quiet = _quiet_cursor() if self.engine.dialect.driver == "asyncmy" else None
        return fairy, cursor_of(fairy, quiet)


async def _keep(entry: _LoopEngine) -> AsyncGenerator[None, None]:
    from sqlalchemy.util import greenlet_spawn

    try:
        yield
    finally:
        for fairy, _ in entry.kept.clear() if entry.kept is not None else []:
            await greenlet_spawn(fairy.close)
        await entry.engine.dispose()


class AsyncSide(Store):
    """Async halves of SQLStore's operations."""

    config: EngineConfig
    held: HeldClaims
    habit: ops.Habit
    purge_batch: int

    def __init__(self) -> None:
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopEngine] = (
            weakref.WeakKeyDictionary()
        )

    # -- engines per loop ---------------------------------------------------------------------
    async def _loop_engine(self) -> _LoopEngine:
        loop = asyncio.get_running_loop()
        entry = self._loops.get(loop)
        if entry is not None:
            return entry
        cfg = self.config
        require("greenlet", cfg.family)
        require(MODULES[cfg.family][1], cfg.family)
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(
            cfg.sqlalchemy_url(asynchronous=True),
            connect_args=cfg.connect_args(asynchronous=True),
            **cfg.engine_options,
        )
        entry = self._loops[loop] = _LoopEngine(engine, kept=AKept(*kept_limits(cfg)))
        entry.keeper = _keep(entry)
        await entry.keeper.__anext__()  # registers it with the loop's asyncgen finaliser
        return entry

    def _forget_async_engines(self) -> None:
        self._loops = weakref.WeakKeyDictionary()

    def _close_async_engines(self) -> None:
        """Dispose each loop's engine on its own loop, from sync code."""
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
        entry = self._loops.pop(asyncio.get_running_loop(), None)
        if entry is not None and entry.keeper is not None:
            await entry.keeper.aclose()
        self.close()

    async def acreate_schema(self) -> None:
        await self._arun(lambda s: schema_op(self.config.family, self.config.table))

    # -- the driver ---------------------------------------------------------------------------
    async def _arun(self, op: Callable[..., ops.Op[ops.T]], *args: Any) -> ops.T:
        value: ops.T = await self._awith(self._adriven, op, *args)
        return value

    async def _adriven(
        self, stmts: Statements, cur: Any, op: Callable[..., ops.Op[ops.T]], *args: Any
    ) -> ops.T:
        return await adrive(op(stmts, *args), self._aexecute, cur)

    @property
    def _aexecute(self) -> Callable[[Any, Stmt], Awaitable[Res]]:
        return _execute_psycopg if self.config.family == "postgresql" else _execute_asyncmy

    async def _aclaim_read_first(self, stmts: Statements, cur: Any, req: ClaimRequest) -> Claim:
        # As the sync side's: the first read decides most duplicates without the generator.
        binary = self.config.family == "postgresql"
        if binary:
            await cur.execute(stmts.select.positional, (req.scope, req.key), binary=True)
        else:
            await cur.execute(stmts.select.positional, (req.scope, req.key))
        seen = ops.seen(stmts, await cur.fetchone(), req, binary)
        answer = ops.standing(req, seen)
        if answer is not None:
            return answer
        return await adrive(ops.claim(stmts, req, seen), self._aexecute, cur)

    async def _aclaim_insert_first(self, stmts: Statements, cur: Any, req: ClaimRequest) -> Claim:
        req = ops.clipped(req)  # as the sync side's: a new key is one insert
        insert = ops.insert(stmts, req)
        made = ops.inserted(stmts, req, insert, await self._aexecute(cur, insert))
        if made is not None:
            return made
        return await adrive(ops.claim(stmts, req), self._aexecute, cur)

    async def _awith(self, fn: Callable[..., Awaitable[ops.T]], *args: Any) -> ops.T:
        """``await fn(statements, cursor, *args)`` on a kept connection, failures mapped."""
        from sqlalchemy.util import greenlet_spawn

        cfg = self.config
        entry = await self._loop_engine()
        kept = entry.kept
        assert kept is not None

        for attempt in range(DEADLOCK_RETRIES + 1):
            try:
                held = await kept.take(entry.checkout)
            except Exception as exc:
                raise cfg.unavailable(exc) from exc
            if entry.statements is None:
                entry.statements = cfg.statements(entry.engine.dialect)
            try:
                value = await fn(entry.statements, held[1], *args)
            except IdempotencyError:
                await _agive(kept, held)
                raise
            except BaseException as exc:
                # Cancelled mid-statement or failed: the connection's state is unknown.
                kept.drop()
                await asyncio.shield(greenlet_spawn(held[0].invalidate))
                if not cfg.is_db_error(exc):
                    raise
                if cfg.retryable(exc) and attempt < DEADLOCK_RETRIES:
                    continue
                raise cfg.unavailable(exc) from exc
            await _agive(kept, held)
            return value
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the protocol -------------------------------------------------------------------------
    # The claim's own row is kept (as on the sync side), so settling it needs no read-back.
    async def aclaim(self, req: ClaimRequest) -> Claim:
        habit = self.habit
        if habit.read_first(req.scope):
            claim = await self._awith(self._aclaim_read_first, req)
        else:
            claim = await self._awith(self._aclaim_insert_first, req)
        habit.saw(req.scope, claim)
        return self.held.keep(claim)

    async def acomplete(
        self, ticket: Ticket, result: bytes, codec: str, ttl: float | None
    ) -> Record:
        return await self._arun(ops.complete, ticket, result, codec, ttl, self.held.pop(ticket))

    async def afail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        return await self._arun(ops.fail, ticket, error, ttl, self.held.pop(ticket))

    async def arelease(self, ticket: Ticket) -> None:
        self.held.pop(ticket)
        await self._arun(ops.release, ticket)

    async def aheartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        return await self._arun(ops.heartbeat, ticket, lease, ttl, self.held.get(ticket))

    async def aget(self, scope: str, key: str) -> Record | None:
        return await self._arun(ops.get, scope, key)

    async def aforget(self, scope: str, key: str) -> bool:
        return await self._arun(ops.forget, scope, key)

    async def aresolve(
        self,
        scope: str,
        key: str,
        *,
        result: bytes | None,
        codec: str | None,
        failed: bool,
        ttl: float | None,
    ) -> Record:
        return await self._arun(ops.resolve, scope, key, result, codec, failed, ttl)

    async def aunresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return await self._arun(ops.unresolved, scope, limit)

    async def apurge(self, limit: int | None = None) -> int:
        return await self._arun(ops.purge, limit, self.purge_batch)

    async def aput_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        await self._arun(ops.put_token, scope, key, token, ttl)

    async def atake_token(self, scope: str, key: str, token: str) -> bool:
        return await self._arun(ops.take_token, scope, key, token)

    async def ahit(self, scope: str, key: str, window: float, limit: int) -> float | None:
        return await self._arun(ops.hit, scope, key, window, limit)
