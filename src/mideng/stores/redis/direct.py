"""Direct sends: the Redis store's probe-free path to a standalone or Sentinel-managed server.

A redis-py client probes every pooled connection before each command: a non-blocking read
to see whether the connection holds stale data or was closed, with the socket switched to
non-blocking and back. That is three system calls around a command that itself needs two
(send, receive), and on virtual machines system calls are most of a round trip's cost. A
direct sender keeps the connections it has just used in its own free list and sends on them without
the probe. That is safe because of how a connection gets back on the list:

- only after a whole reply was read (an error reply is a whole reply), so no reply is ever
  left behind to answer the next command. Any other exception (a timeout, a reset, a
  cancellation half-way through a reply) disconnects the connection and hands it back to
  redis-py's pool, which reconnects it before it is used again;
- a connection idle for more than ``idle_probe`` seconds goes back through the pool and its
  probe, so one the server closed meanwhile (its ``timeout`` setting is at least a second,
  a restart) is replaced instead of failing a call.

What the probe cannot rule out either, a server that closes a connection between one command
and the next, fails that call with StoreUnavailableError; it never runs anything twice.

Connections come from, and count against, the client's own pool, so ``max_connections``
still bounds them. Commands are packed here, in the few shapes the store sends (str, bytes
and int arguments; strings as UTF-8). A forked child starts with an empty list: it never
writes to a socket its parent is using.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import time
import weakref
from typing import Any

# redis-py's own value: arguments larger than this are sent as separate buffers, not copied.
_CUTOFF = 6000
IDLE_PROBE = 1.0

_senders: weakref.WeakSet[DirectSender | AsyncDirectSender] = weakref.WeakSet()


def _forget_all() -> None:
    for sender in list(_senders):
        sender.free.clear()


os.register_at_fork(after_in_child=_forget_all)


# A bulk string's header for the short lengths most arguments have, made once: formatting one
# per argument was a third of packing a batch's hundreds of arguments.
_HEADS = tuple(b"$%d\r\n" % n for n in range(1024))


def pack(args: tuple[Any, ...]) -> list[bytes]:
    """A command in the RESP protocol, as buffers to send one after another. A command name
    of two words ("FUNCTION LOAD") is sent as two arguments, as redis-py does."""
    if " " in args[0]:
        args = (*args[0].split(), *args[1:])
    out: list[bytes] = []
    part = [b"*%d\r\n" % len(args)]
    add = part.append
    for arg in args:
        kind = type(arg)  # exact types first: a batch sends hundreds of str arguments
        if kind is str:
            data = arg.encode()
        elif kind is bytes:
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        elif isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, int):
            data = b"%d" % arg
        else:
            raise TypeError(f"cannot send {type(arg).__name__} to Redis")
        n = len(data)
        if n < 1024:
            add(_HEADS[n])
            add(data)
            add(b"\r\n")
        elif n > _CUTOFF:
            add(b"$%d\r\n" % n)
            out.append(b"".join(part))
            out.append(data)
            part = [b"\r\n"]
            add = part.append
        else:
            add(b"$%d\r\n" % n)
            add(data)
            add(b"\r\n")
    out.append(b"".join(part))
    return out


def _checkout(pool: Any) -> Any:
    """The pool's get_connection; redis-py before 8 wants a command name (it ignores it)."""
    first = next(iter(inspect.signature(pool.get_connection).parameters.values()), None)
    if (
        first is not None
        and first.default is inspect.Parameter.empty
        and first.kind
        in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        )
    ):
        return functools.partial(pool.get_connection, "FCALL")
    return pool.get_connection


def _moving(conn: Any) -> bool:
    """Whether a maintenance notice told this connection to move (redis-py 7 and later)."""
    check = getattr(conn, "should_reconnect", None)
    return check is not None and bool(check())


def usable(pool: Any) -> bool:
    """Whether a direct sender may drive a pool's connections.

    A push that arrives on an idle RESP3 connection (a maintenance notice) is read and handled
    by redis-py's parser ahead of the next reply, so the sender stays in step. Client-side
    caching is left to redis-py: it answers some reads from its cache without a round trip.
    """
    return getattr(pool, "cache", None) is None


class DirectSender:
    """Sends packed commands on recently used connections of one sync pool."""

    def __init__(
        self, pool: Any, reply_error: type[BaseException], idle_probe: float = IDLE_PROBE
    ) -> None:
        self.pool = pool
        # redis-py's ResponseError: the server answered with an error, the reply is whole.
        self.reply_error = reply_error
        self.idle_probe = idle_probe
        self.free: list[tuple[Any, float]] = []
        self._checkout = _checkout(pool)
        _senders.add(self)

    def _take(self) -> Any:
        try:
            conn, used = self.free.pop()
        except IndexError:
            return self._checkout()
        if time.monotonic() - used > self.idle_probe:
            self.pool.release(conn)
            return self._checkout()
        return conn

    def call(self, command: list[bytes]) -> Any:
        conn = self._take()
        try:
            conn.send_packed_command(command)
            reply = conn.read_response()
        except self.reply_error:
            self._give(conn)
            raise
        except BaseException:
            self._drop(conn)
            raise
        self._give(conn)
        return reply

    def call_many(self, commands: list[list[bytes]]) -> list[Any]:
        """Send every command in one write and read every reply (a batch, pipelined). An
        error reply is whole, so it is kept in its place and the rest are still read."""
        conn = self._take()
        replies: list[Any] = []
        try:
            conn.send_packed_command([b for command in commands for b in command])
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except self.reply_error as exc:
                    replies.append(exc)
        except BaseException:
            self._drop(conn)
            raise
        self._give(conn)
        return replies

    def _give(self, conn: Any) -> None:
        # A connection told to move (a maintenance notice) goes back through the pool,
        # which reconnects it.
        if _moving(conn):
            self.pool.release(conn)
        else:
            self.free.append((conn, time.monotonic()))

    def _drop(self, conn: Any) -> None:
        """Disconnect a connection and hand it back to the pool, which reconnects it before
        it is used again (one left mid-reply, or no longer wanted)."""
        conn.disconnect()
        self.pool.release(conn)

    def close(self) -> None:
        free, self.free = self.free, []
        for conn, _ in free:
            self._drop(conn)


class AsyncDirectSender:
    """The same for one asyncio pool (a store has one per event loop)."""

    def __init__(self, pool: Any, reply_error: type[BaseException]) -> None:
        self.pool = pool
        self.reply_error = reply_error
        self.free: list[Any] = []
        self._checkout = _checkout(pool)
        _senders.add(self)

    async def _take(self) -> Any:
        try:
            conn = self.free.pop()
        except IndexError:
            return await self._checkout()
        # Here the probe costs no system call (it looks at what the event loop has already
        # read, end of stream included), so every reused connection gets it. redis-py's own
        # pool ignores its answer when maintenance notifications are on; this sender does not.
        probe = getattr(conn, "can_read", None) or conn.can_read_destructive  # before 8
        try:
            try:
                dirty = await probe()
            except Exception:  # a closed stream, as the probe of some versions says it
                dirty = True
            if dirty:
                await conn.disconnect()  # waits a turn of the loop for the transport
        except BaseException:
            # Cancelled there: the connection is off the list and not yet the caller's, so
            # it goes back to the pool, or it would count against max_connections for ever.
            await self.pool.release(conn)
            raise
        return conn

    async def call(self, command: list[bytes]) -> Any:
        conn = await self._take()
        try:
            await _send(conn, command)
            reply = await conn.read_response()
        except self.reply_error:
            await self._give(conn)
            raise
        except BaseException:
            await self._drop(conn)
            raise
        await self._give(conn)
        return reply

    async def call_many(self, commands: list[list[bytes]]) -> list[Any]:
        """``DirectSender.call_many`` on the loop."""
        conn = await self._take()
        replies: list[Any] = []
        try:
            await _send(conn, [b for command in commands for b in command])
            for _ in commands:
                try:
                    replies.append(await conn.read_response())
                except self.reply_error as exc:
                    replies.append(exc)
        except BaseException:
            await self._drop(conn)
            raise
        await self._give(conn)
        return replies

    async def _give(self, conn: Any) -> None:
        if _moving(conn):
            await self.pool.release(conn)
        else:
            self.free.append(conn)

    async def _drop(self, conn: Any) -> None:
        """As ``DirectSender._drop``, the transport closed without waiting for it."""
        await conn.disconnect(nowait=True)
        await self.pool.release(conn)

    async def aclose(self) -> None:
        free, self.free = self.free, []
        for conn in free:
            await conn.disconnect()
            await self.pool.release(conn)


async def _send(conn: Any, command: list[bytes]) -> None:
    """``conn.send_packed_command(command)``, written to the connection's stream here when it
    is open and has no health check due: redis-py bounds every send with ``asyncio.wait_for``,
    a Task, a future and a timer made per command and an extra turn of the loop, where a
    command that fits the socket's buffer is sent by the write itself. One that does not (the
    transport keeps the rest) is waited for, bounded by the socket timeout, as redis-py does;
    any other state takes redis-py's own path (it connects, checks health, raises its errors).
    """
    writer = getattr(conn, "_writer", None)
    if writer is None or conn.health_check_interval or writer.transport.is_closing():
        await conn.send_packed_command(command)
        return
    writer.writelines(command)
    if writer.transport.get_write_buffer_size():
        await asyncio.wait_for(writer.drain(), conn.socket_timeout)
