"""Redis store: every operation is one Lua function call (or one plain command), one round trip.

A record is one hash at ``{prefix}:{scope:key}`` (see commands; its fields, rows). Lua
operations (a function library, or scripts on Redis 6; see scripts) read the store's clock
(``TIME``), decide by the rules of mideng.core.decide, write, and answer with the record.
The key's own expiry follows the record's ``expires_at``, so Redis deletes finished records
itself and ``purge`` has nothing to do.

Sync calls use a redis-py client; async calls use a redis.asyncio client per event loop, made on
first use there. Both run the same Ops from commands: built and decoded once. On a
standalone or Sentinel-managed server the commands go out through a direct sender (see
direct), which skips redis-py's per-command connection probe.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, TypeVar, overload

from mideng.core import effects
from mideng.core.effects import Effects, either
from mideng.core.event_loop import running_loop
from mideng.core.record import Claim, ClaimRequest, Record, Resolution, Ticket
from mideng.errors import ConfigurationError, StoreUnavailableError
from mideng.stores.base import Store
from mideng.stores.redis.batch import RedisBatch
from mideng.stores.redis.commands import Command, Commands, stuck
from mideng.stores.redis.connect import Connection, Target, connect, parse, redact
from mideng.stores.redis.direct import AsyncDirectSender, DirectSender, pack, usable
from mideng.stores.redis.layout import check as layout_check
from mideng.stores.redis.scripts import Calls, scripts
from mideng.stores.redis.steps import RedisSteps, StepCommands, fields
from mideng.stores.redis.survey import RedisSurvey, every_name, read_each
from mideng.stores.registry import in_front, require

T = TypeVar("T")


class RedisStore(Store, RedisBatch, RedisSteps, RedisSurvey):
    """Standalone Redis, Redis Cluster or a Sentinel-managed master, sync and asyncio."""

    self_expiring = True

    def __init__(
        self, target: Target, *, url: str = "", prefix: str = "mideng", retries: int = 0
    ) -> None:
        self.commands = Commands(prefix, scripts())
        self.steps = StepCommands(self.commands)
        self._redis = require("redis", "redis")
        if target.kind == "standalone":
            try:
                self._redis.connection.parse_url(target.url)
            except ValueError as exc:
                raise ConfigurationError(f"bad Redis URL {redact(url)}: {exc}") from exc
        self.url = url
        self.prefix = prefix
        self._target = target
        self._retries = retries
        self._safe_url = redact(url)
        errors = self._redis.exceptions
        self._errors: tuple[type[BaseException], ...] = (
            errors.RedisError,
            errors.RedisClusterException,
            OSError,
        )
        self._reply_error: type[BaseException] = errors.ResponseError
        self._calls = Calls(self.commands.scripts, errors.NoScriptError)
        self._sync: Connection | None = None
        self._async: dict[asyncio.AbstractEventLoop, Connection] = {}
        self._alocks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._lock = threading.Lock()
        #: The prefix's key layout command (stores.redis.layout); read once, then never.
        self.layout = layout_check(prefix)
        self._layout_read = False

    @overload
    @classmethod
    def from_url(cls, url: str, *, durable: None = None, **options: Any) -> RedisStore: ...

    @overload
    @classmethod
    def from_url(cls, url: str, *, durable: str | Store, **options: Any) -> Store: ...

    @classmethod
    def from_url(
        cls, url: str, *, durable: str | Store | None = None, **options: Any
    ) -> RedisStore | Store:
        """Open ``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://`` or
        ``redis+sentinel://``. Options: ``prefix`` (default ``mideng``), ``retries`` (driver
        retries, default 0), and redis-py's own (``socket_timeout``, ``max_connections``, ...).
        ``durable=<url or Store>`` opens a HybridStore: this Redis in front of that store
        (the registry builds it, so this module never needs the hybrid's).
        """
        target, own = parse(url, dict(options))
        store = cls(target, url=url, **own)
        return store if durable is None else in_front(store, durable)

    def key(self, scope: str, key: str) -> str:
        """The Redis key holding the record of (scope, key)."""
        return self.commands.key(scope, key)

    # -- running commands ---------------------------------------------------------------------
    def _unavailable(self, exc: BaseException) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"Redis store {self._safe_url} failed: {type(exc).__name__}: {exc}"
        )

    def _client(self) -> Any:
        return self._connection().client

    def _connection(self) -> Connection:
        conn = self._sync
        if conn is None:
            with self._lock:
                if self._sync is None:
                    try:
                        made = connect(self._redis, self._target, self._retries, asynchronous=False)
                    except self._errors as exc:
                        raise self._unavailable(exc) from exc
                    if self._sends_directly(made):
                        made.direct = DirectSender(made.client.connection_pool, self._reply_error)
                    if not self._layout_read:
                        self._read_layout(made)
                    self._sync = made
                conn = self._sync
        return conn

    def _read_layout(self, conn: Connection) -> None:
        """The prefix's key layout, once per store, before its first command (see layout)."""
        read = self.layout
        try:
            read.finish(self._send(conn, read.args))
        except BaseException as exc:
            conn.close()
            if isinstance(exc, self._errors):
                raise self._unavailable(exc) from exc
            raise
        self._layout_read = True

    def _sends_directly(self, conn: Connection) -> bool:
        # A cluster client routes each command to its slot's node, and a user who asked for
        # driver retries gets redis-py's own path, which does them.
        return (
            self._target.kind != "cluster"
            and self._retries == 0
            and usable(conn.client.connection_pool)
        )

    async def _aconnection(self) -> Connection:
        loop = running_loop()  # every async operation asks: no getpid() system call
        conn = self._async.get(loop)
        if conn is None:
            conn = await self._aconnect(loop)
        return conn

    async def _aclient(self) -> Any:
        return (await self._aconnection()).client

    async def _aconnect(self, loop: asyncio.AbstractEventLoop) -> Connection:
        async with self._alocks.setdefault(loop, asyncio.Lock()):
            conn = self._async.get(loop)
            if conn is not None:
                return conn
            conn = connect(self._redis, self._target, self._retries, asynchronous=True)
            if self._target.kind == "cluster":
                # redis-py's asyncio cluster client mixes up connections when many tasks make
                # its first call at once; learning the slot map first, alone, avoids that.
                try:
                    await conn.client.initialize()
                except BaseException:
                    await conn.aclose()
                    raise
            elif self._sends_directly(conn):
                conn.direct = AsyncDirectSender(conn.client.connection_pool, self._reply_error)
            if not self._layout_read:
                try:
                    read = self.layout
                    read.finish(await self._asend(conn, read.args))
                except BaseException:
                    await conn.aclose()
                    raise
                self._layout_read = True
            self._async[loop] = conn
            return conn

    def _send(self, conn: Connection, args: tuple[Any, ...]) -> Any:
        if conn.direct is not None:
            return conn.direct.call(pack(args))
        return conn.client.execute_command(*args)

    def _run(self, op: Command[T]) -> T:
        conn = self._connection()
        calls = self._calls
        try:
            try:
                reply = self._send(conn, calls.form(op.script, op.args))
            except self._reply_error as exc:
                for load in calls.loads(exc):
                    self._send(conn, load)
                reply = self._send(conn, calls.form(op.script, op.args))
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return op.finish(reply)

    async def _asend(self, conn: Connection, args: tuple[Any, ...]) -> Any:
        if conn.direct is not None:
            return await conn.direct.call(pack(args))
        return await conn.client.execute_command(*args)

    async def _arun(self, op: Command[T]) -> T:
        try:
            conn = await self._aconnection()
            calls = self._calls
            try:
                reply = await self._asend(conn, calls.form(op.script, op.args))
            except self._reply_error as exc:
                for load in calls.loads(exc):
                    await self._asend(conn, load)
                reply = await self._asend(conn, calls.form(op.script, op.args))
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return op.finish(reply)

    # -- sync ---------------------------------------------------------------------------------
    def claim(self, req: ClaimRequest) -> Claim:
        return self._run(self.commands.claim(req))

    def complete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Record:
        return self._run(self.commands.complete(ticket, result, codec, ttl))

    def fail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        return self._run(self.commands.fail(ticket, error, ttl))

    def release(self, ticket: Ticket) -> None:
        self._run(self.commands.release(ticket))

    def heartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        return self._run(self.commands.heartbeat(ticket, lease, ttl))

    def get(self, scope: str, key: str) -> Record | None:
        return self._run(self.commands.get(scope, key))

    def forget(self, scope: str, key: str) -> bool:
        return self._run(self.commands.forget(scope, key))

    def now(self) -> float:
        return self._run(self.commands.now())

    def resolve(self, scope: str, key: str, how: Resolution) -> Record:
        return self._run(self.commands.resolve(scope, key, how))

    def put(self, record: Record) -> bool:
        """Store a copy of a finished record as it is (the hybrid store's fast path).
        False when a newer copy was already there."""
        return self._run(self.commands.put(record))

    def put_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        self._run(self.commands.put_token(scope, key, token, ttl))

    def take_token(self, scope: str, key: str, token: str) -> bool:
        return self._run(self.commands.take_token(scope, key, token))

    def hit(self, scope: str, key: str, window: float, limit: int) -> float | None:
        return self._run(self.commands.hit(scope, key, window, limit))

    def purge(self, limit: int | None = None) -> int:
        """Always 0: every record key carries its own expiry (PEXPIREAT from ``expires_at``),
        so Redis deletes expired records itself and nothing is ever left to purge."""
        return 0

    def unresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return effects.run(self._unresolved(self._client(), scope, limit))

    def _unresolved(self, client: Any, scope: str | None, limit: int) -> Effects[list[Record]]:
        # A SCAN, not an index: an index key would put a second slot into every claim on a
        # cluster and a second write into every claim anywhere, for the sake of an operator view.
        try:
            sec, usec = yield either(client.time)
            names = yield from every_name(client, self.commands.pattern(scope))
            rows = yield from read_each(client, names, fields)
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return stuck(self.commands, names, rows, scope, sec + usec / 1e6, limit)

    def close(self) -> None:
        with self._lock:
            conn, self._sync = self._sync, None
            loops, self._async, self._alocks = self._async, {}, {}
        if conn is not None:
            conn.close()
        for loop, aconn in loops.items():
            aconn.close_from_outside(loop)

    # -- async --------------------------------------------------------------------------------
    async def aclaim(self, req: ClaimRequest) -> Claim:
        return await self._arun(self.commands.claim(req))

    async def acomplete(
        self, ticket: Ticket, result: bytes, codec: str, ttl: float | None
    ) -> Record:
        return await self._arun(self.commands.complete(ticket, result, codec, ttl))

    async def afail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        return await self._arun(self.commands.fail(ticket, error, ttl))

    async def arelease(self, ticket: Ticket) -> None:
        await self._arun(self.commands.release(ticket))

    async def aheartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        return await self._arun(self.commands.heartbeat(ticket, lease, ttl))

    async def aget(self, scope: str, key: str) -> Record | None:
        return await self._arun(self.commands.get(scope, key))

    async def aforget(self, scope: str, key: str) -> bool:
        return await self._arun(self.commands.forget(scope, key))

    async def anow(self) -> float:
        return await self._arun(self.commands.now())

    async def aresolve(self, scope: str, key: str, how: Resolution) -> Record:
        return await self._arun(self.commands.resolve(scope, key, how))

    async def aput(self, record: Record) -> bool:
        return await self._arun(self.commands.put(record))

    async def aput_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        await self._arun(self.commands.put_token(scope, key, token, ttl))

    async def atake_token(self, scope: str, key: str, token: str) -> bool:
        return await self._arun(self.commands.take_token(scope, key, token))

    async def ahit(self, scope: str, key: str, window: float, limit: int) -> float | None:
        return await self._arun(self.commands.hit(scope, key, window, limit))

    async def apurge(self, limit: int | None = None) -> int:
        return 0

    async def aunresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return await effects.arun(self._unresolved(await self._aclient(), scope, limit))

    async def aclose(self) -> None:
        """Close this loop's client here; clients of other loops and the sync one as close()."""
        loop = asyncio.get_running_loop()
        self._alocks.pop(loop, None)
        conn = self._async.pop(loop, None)
        if conn is not None:
            await conn.aclose()
        self.close()


__all__ = ["RedisStore"]
