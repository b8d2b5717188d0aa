"""The SQLite store's async calls, run on the event loop's thread when they need not wait.

An embedded store's async operation is its sync one run in the loop's default executor: two
thread hops, which on a small machine cost far more than the statements (a duplicate's read is
tens of µs, the hops about 200 µs on 2 vCPUs). Yet a SQLite statement waits on nothing but the
file's write lock and, under ``synchronous=FULL``, a disk flush. So the calls every guarded
call makes (a claim, a completion, a failure, a release, a heartbeat, a look-up) run in place,
on a connection of the loop thread's own that never waits:

- its busy timeout is 0: a write that finds another connection holding the lock fails at once,
  before it changed anything (each of those operations is autocommit statements, each atomic,
  that a failed one leaves as they were), and the operation is made again in the executor,
  whose connection waits up to the store's ``timeout`` as before. The loop is never held for
  the lock.
- it never checkpoints (``wal_autocheckpoint=0``): a checkpoint writes the WAL back and flushes
  the file, which may take milliseconds. Once ``CHECKPOINT_ROWS`` rows were written in place
  since the last one (about as many WAL pages as SQLite's own 1000-page default lets grow), a
  passive checkpoint (which waits for nothing) is started in the executor, one at a time, and
  no call waits for it; the executor's own connections checkpoint as they always did.
- with ``synchronous=FULL`` or ``EXTRA`` every commit flushes the disk: nothing runs in place.

Batches, tokens, windows, the operator's scans and the operations' steps keep the executor:
they are rarer, or long, or more than one row.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

from mideng.core.loops import running_loop, to_thread
from mideng.errors import StoreUnavailableError
from mideng.observability import logs
from mideng.stores.base import T
from mideng.stores.sql.connections import Process

#: The operations made in place: one record's autocommit statements each.
INLINE = frozenset({"claim", "complete", "fail", "release", "heartbeat", "get"})
CHECKPOINT_ROWS = 512
_WAITED = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (the primary result codes)


class _Inline:
    """The loop thread's own connection, its claim cursor, the process it was opened in, the
    rows it had written when the last checkpoint started, and that checkpoint."""

    __slots__ = ("checkpoint", "conn", "cur", "pid", "written")

    def __init__(self, conn: sqlite3.Connection, pid: int) -> None:
        self.conn, self.pid, self.written = conn, pid, 0
        self.checkpoint: asyncio.Future[None] | None = None
        self.cur: sqlite3.Cursor | None = conn.cursor()


def waited(exc: StoreUnavailableError) -> bool:
    """Whether the store's failure is SQLite's refusal to wait for a lock (busy or locked)."""
    cause = exc.__cause__
    code = getattr(cause, "sqlite_errorcode", None)
    return (
        isinstance(cause, sqlite3.OperationalError) and code is not None and code & 0xFF in _WAITED
    )


class InlineCalls:
    """SQLiteStore's ``_offload``: the calls of ``INLINE`` in place, the rest in the executor.

    The store's operations read the thread's connection and cursor off ``self._local``; in
    place, those are the loop thread's own connection's for the length of the call (nothing
    else runs on this thread meanwhile), and the thread's usual ones again after it."""

    # The store's, set in SQLiteStore.__init__.
    path: str
    inline: bool
    _synchronous: str
    _local: threading.local
    _all: list[sqlite3.Connection]
    _all_lock: threading.Lock

    async def _offload(self, fn: Callable[..., T], *args: Any) -> T:
        if self.inline and getattr(fn, "__name__", None) in INLINE:
            local = self._local
            seen = local.__dict__
            own: _Inline | None = seen.get("inline")
            if own is None or own.pid != Process.pid:
                own = self._open_inline()
            kept = seen.get("conn"), seen.get("cur"), seen.get("pid")
            seen["conn"], seen["cur"], seen["pid"] = own.conn, own.cur, own.pid
            try:
                result = fn(*args)
            except StoreUnavailableError as exc:
                if not waited(exc):
                    raise
                result = _WAIT  # the lock is held elsewhere: waited for in the executor
            finally:
                own.cur = seen.get("cur")  # None after a failure: made again next time
                for name, value in zip(("conn", "cur", "pid"), kept, strict=True):
                    if value is None:
                        seen.pop(name, None)
                    else:
                        seen[name] = value
            if result is not _WAIT:
                # Rows written (total_changes counts them; a read writes none), not calls: a
                # replay leaves nothing in the WAL to copy back.
                if own.conn.total_changes - own.written >= CHECKPOINT_ROWS:
                    self._start_checkpoint(own)
                return result
        return await to_thread(fn, *args)

    def _open_inline(self) -> _Inline:
        try:
            conn = sqlite3.connect(
                self.path, timeout=0, isolation_level=None, check_same_thread=False
            )
            # The file is in WAL mode already (the store's first connection set it, and the
            # mode is the file's); the flushes are the store's, and this connection never
            # waits and never checkpoints.
            conn.execute(f"PRAGMA synchronous={self._synchronous}")  # a connection's own
            conn.execute("PRAGMA busy_timeout=0")
            conn.execute("PRAGMA wal_autocheckpoint=0")
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot open SQLite store {self.path}: {exc}") from exc
        with self._all_lock:
            self._all.append(conn)
        own = _Inline(conn, Process.pid)
        self._local.inline = own
        return own

    def _start_checkpoint(self, own: _Inline) -> None:
        running = own.checkpoint
        if running is None or running.done():
            own.written = own.conn.total_changes
            own.checkpoint = running_loop().run_in_executor(None, self._checkpoint)

    def _checkpoint(self) -> None:
        """A passive checkpoint on this (executor) thread's connection: it copies what no
        reader still needs and waits for nobody; its failure is only logged (the call that
        made it is done, and the next checkpoint picks up where this one stopped)."""
        try:
            self._conn().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except (sqlite3.Error, StoreUnavailableError) as exc:
            logs.checkpoint_failed(self.path, exc)

    def _conn(self) -> sqlite3.Connection:
        raise NotImplementedError  # the store's: this thread's connection


_WAIT: Any = object()
