"""SQLite store: the embedded default, safe across threads and processes sharing one file.

Its operations are the record table's own (``stores.record_table.ops``) on SQLite's statements
(``statements``), run by mideng.db's loop on a sqlite3 connection per thread (a forked child
opens its own). Each is autocommit statements that SQLite makes atomic across processes by
itself: a claim inserts a fresh row (yielding to a racer) or reads the row and, when
core.decide says it must change, compare-and-sets it as read; completing is one fenced update.
The claim order is learned per scope as on the server stores (``record_table.claims``): a first
call is the insert and the completion, a duplicate of a finished call one read (of the columns
such a row does not imply, ``rows.REPLAYED``). Both are sent by the store itself, without
entering the operation's generator. WAL lets readers run beside the single writer; a writer
waits up to ``timeout`` for the lock (SQLite's busy handler), then fails as
StoreUnavailableError.

Async calls run on the event loop's thread when they need not wait. An embedded store's async
operation is its sync one run in the loop's default executor: two thread hops, which on a small
machine cost far more than the statements (a duplicate's read is tens of µs, the hops about
200 µs on 2 vCPUs). Yet a SQLite statement waits on nothing but the file's write lock and,
under ``synchronous=FULL``, a disk flush. So the calls every guarded call makes (a claim, a
completion, a failure, a release, a heartbeat, a look-up) run in place, on a connection of the
loop thread's own that never waits:

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
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from mideng.core import decide as rules
from mideng.core.audit import AuditEntry, AuditQuery, AuditRow
from mideng.core.event_loop import running_loop, to_thread
from mideng.core.process import Process
from mideng.core.record import (
    ACQUIRED,
    GOES_UNKNOWN,
    Claim,
    ClaimRequest,
    Record,
    Resolution,
    Ticket,
)
from mideng.db.drive import drive
from mideng.db.statements import Op, check_table
from mideng.errors import ConfigurationError, StoreUnavailableError
from mideng.observability import logs
from mideng.schema.apply import command as migrate_command
from mideng.schema.apply import ensure
from mideng.schema.tables import records as record_tables
from mideng.stores.audit import AuditStore
from mideng.stores.base import Step, T
from mideng.stores.batch import Completion, LocalBatch
from mideng.stores.record_table import ops
from mideng.stores.record_table.claims import ClaimOrder, HeldClaims
from mideng.stores.record_table.rows import sqlite_replayed, sqlite_replayed_as, typed
from mideng.stores.record_table.schema import DEFAULT_TABLE
from mideng.stores.record_table.transactional import RecordTable
from mideng.stores.sqlite.ops import purge, records, transact
from mideng.stores.sqlite.statements import SQLiteStatements, execute_sqlite
from mideng.stores.sqlite.steps import SQLiteSteps
from mideng.stores.sqlite.survey import SQLiteSurvey

PURGE_BATCH = 1000
#: Scopes whose replay read the store writes out for them (``SQLiteStatements.replay_in``):
#: each is one more statement in every connection's cache, which sqlite3 keeps at 128.
REPLAY_SCOPES = 32

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


#: What a call made in place answers when the lock was held elsewhere: made again in the
#: executor.
_WAIT: Any = object()


class SQLiteStore(LocalBatch, SQLiteSteps, SQLiteSurvey, AuditStore):
    def __init__(
        self,
        path: str,
        *,
        table: str = DEFAULT_TABLE,
        timeout: float = 30.0,
        synchronous: str = "NORMAL",
        read_first: bool | None = None,
        inline: bool | None = None,
        auto_upgrade: bool = True,
    ) -> None:
        check_table(table)
        if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ConfigurationError(f"synchronous must be OFF/NORMAL/FULL/EXTRA: {synchronous!r}")
        self.path = path
        self.url = f"sqlite:///{path}"
        self.table = table
        #: The transactional mode's way in: this store's records are rows of ``table``.
        self.record_table = RecordTable(table)
        #: The set of tables the store keeps (mideng.schema). An embedded database has no
        #: separate deploy step to migrate it, so by default an older version is upgraded
        #: when the store opens.
        self.tables = record_tables(table)
        self.auto_upgrade = auto_upgrade
        self.statements = SQLiteStatements(table)
        #: ``read_first`` as on SQLStore: None learns each scope's claim order.
        self.claim_order = ClaimOrder(read_first)
        self.held = HeldClaims()
        #: Where the next ``purge`` resumes its walk of the primary key.
        self.sweep: ops.Sweep[tuple[str, str]] = ops.Sweep()
        self.older_sweep: ops.Sweep[tuple[str, str]] = ops.Sweep()
        #: Per scope, its replay read and the codec that read expects (``_learn``).
        self._replays: dict[str, tuple[str, str]] = {}
        self._timeout = timeout
        self._synchronous = synchronous.upper()
        #: Whether async calls run on the loop's thread when they need not wait (``_offload``):
        #: by default, unless every commit flushes the disk.
        self.inline = self._synchronous in ("OFF", "NORMAL") if inline is None else bool(inline)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._conn()  # fail at open time, not on the first call, if the file is unusable

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteStore:
        path, given = sqlite_url(url)
        return cls(path, **{**given, **options})

    # -- connections --------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is not None and local.pid == Process.pid:
            return conn
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot open SQLite store {self.path}: {exc}") from exc
        # The claim's own statements run on one cursor per connection, made once: a cursor
        # per statement (``conn.execute``) is another object made and torn down each time.
        local.conn, local.cur, local.pid = conn, conn.cursor(), Process.pid
        with self._all_lock:
            self._all.append(conn)
        return conn

    def _connect(self) -> sqlite3.Connection:
        """A new connection, its tables ready (``_ensure``); closed again if they are not."""
        conn = sqlite3.connect(
            self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
            self._retrying(lambda: self._ensure(conn))
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _cursor(self) -> sqlite3.Cursor:
        """This thread's claim cursor: made with the connection, or again after a failure."""
        conn, local = self._conn(), self._local
        cur: sqlite3.Cursor | None = getattr(local, "cur", None)
        if cur is None:
            cur = local.cur = conn.cursor()
        return cur

    def _cursor_failed(self, cur: sqlite3.Cursor, exc: BaseException) -> None:
        """``_failed`` for a statement on the claim cursor. Its statement may be left on a row
        (a row sqlite3 could not read, an interrupt between execute and fetchone), and an
        unfinished read keeps its snapshot open for every later statement on the connection:
        the cursor is closed, which ends it, and the next claim makes another."""
        self._local.cur = None
        with contextlib.suppress(sqlite3.Error):  # closing on a broken connection
            cur.close()
        self._failed(cur.connection, exc)

    def _ensure(self, conn: sqlite3.Connection) -> None:
        """The start-up rule (mideng.schema) on a new connection: the file in WAL mode, the
        tables made when missing, upgraded when older and allowed; SchemaVersionError for a
        version it may not use."""
        conn.execute("PRAGMA journal_mode=WAL")
        command = migrate_command(self.url, self.tables)
        ensured = ensure("sqlite", self.tables, auto_upgrade=self.auto_upgrade, command=command)
        drive(ensured, execute_sqlite, conn)

    @staticmethod
    def _retrying(ensure: Callable[[], None]) -> None:
        # Several processes creating the schema at once may see "database is locked" on the
        # WAL switch despite busy_timeout; the migration is idempotent, so try again briefly.
        for attempt in range(50):
            try:
                ensure()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 49:
                    raise
                time.sleep(0.01 * (attempt + 1))

    def close(self) -> None:
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):  # closing a broken connection
                conn.close()
        self._local = threading.local()

    # -- async calls: in place on the loop thread's own connection, or in the executor -------
    async def _offload(self, fn: Callable[..., T], *args: Any) -> T:
        """The calls of ``INLINE`` in place, the rest in the executor. The store's operations
        read the thread's connection and cursor off ``self._local``; in place, those are the
        loop thread's own connection's for the length of the call (nothing else runs on this
        thread meanwhile), and the thread's usual ones again after it."""
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

    # -- running operations -------------------------------------------------------------------
    def _drive(self, op: Op[T]) -> T:
        conn = self._conn()
        try:
            return drive(op, execute_sqlite, conn)
        except BaseException as exc:
            self._failed(conn, exc)
            raise

    def _failed(self, conn: sqlite3.Connection, exc: BaseException) -> None:
        """After an operation raised: end its transaction, if it holds one; a database error
        becomes StoreUnavailableError (raised from here)."""
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise StoreUnavailableError(f"SQLite store {self.path} failed: {exc}") from exc

    # -- the claim: its first statement sent without entering the operation's generator -------
    def claim(self, req: ClaimRequest) -> Claim:
        s, order = self.statements, self.claim_order
        local = self._local  # _conn's common case, inline
        cur = getattr(local, "cur", None)
        if cur is None or local.pid != Process.pid:
            cur = self._cursor()
        scope = req.scope
        first, share = order.fixed, None  # a pinned order asks nothing of the learned one
        if first is None:  # ClaimOrder.read_first, inline
            share = order.shares.get(scope)
            first = share is not None and share >= 0.5
        try:
            if first:
                now, key = time.time(), req.key
                # fetchone steps past the one row, which ends the statement (and its read).
                learnt = self._replays.get(scope)  # the scope's own replay read, if learnt
                row = (
                    cur.execute(s.replay_q, (scope, key))
                    if learnt is None
                    else cur.execute(learnt[0], (key,))
                ).fetchone()
                if row is None:
                    found = None
                elif row[0] is None:  # not a finished replay (or another codec): read whole
                    found, now = self._whole(cur, scope, key, learnt is not None)
                elif learnt is not None:  # a finished replay: the columns it implies unread
                    found = sqlite_replayed_as(row, scope, key, learnt[1])
                else:
                    found = sqlite_replayed(row, scope, key)
                    self._learn(scope, found.codec)
                if found is not None:
                    claim, write = rules.decide(found, req, now)
                    if write:  # the read alone does not decide it: on in the operation
                        claim = drive(
                            ops.claim(s, req, (found, now)), execute_sqlite, cur.connection
                        )
                else:
                    claim = drive(ops.claim(s, req, None), execute_sqlite, cur.connection)
            else:
                req = ops.clipped(req)
                now = time.time()
                ttl = None if req.on_expiry is GOES_UNKNOWN else req.ttl
                lease = float(req.lease)
                # fmt: off
                params = (req.scope, req.key, req.owner, req.fingerprint, now, lease,
                          req.request_id, now, now, now, lease, ttl)
                # fmt: on
                if cur.execute(s.insert_q, params).rowcount == 1:
                    claim = Claim(ACQUIRED, rules.fresh(req, now, None))
                else:  # the key is taken: on as the operation goes, reading first
                    claim = drive(ops.claim(s, req), execute_sqlite, cur.connection)
        except BaseException as exc:
            self._cursor_failed(cur, exc)
            raise
        acquired = claim.outcome is ACQUIRED
        # ClaimOrder.saw's own first test, inline: a share settled on this outcome stays.
        taken = 0.0 if acquired and claim.record.fence == 1 else 1.0
        if order.fixed is None and share != taken:
            order.saw(scope, claim)
        if acquired:
            self.held.keep(claim)
        return claim

    def _whole(
        self, cur: sqlite3.Cursor, scope: str, key: str, learnt: bool
    ) -> tuple[Record | None, float]:
        """The claim's row read whole, and the clock before it, as if this were the claim's
        only read: its first read found no finished replay."""
        if learnt:  # perhaps a replay of another codec: the scope's read is learnt again
            self._replays.pop(scope, None)
        now = time.time()
        row = cur.execute(self.statements.select_q, (scope, key)).fetchone()
        return (None if row is None else typed(row, scope, key)), now

    def _learn(self, scope: str, codec: str | None) -> None:
        """After a replay read by the generic statement: the scope's own from now on (its
        replays are one codec, the scope's policy's, nearly always)."""
        replays = self._replays
        if len(replays) < REPLAY_SCOPES:
            q = self.statements.replay_in(scope, codec)
            if q is not None:
                assert codec is not None
                replays[scope] = (q, codec)

    def complete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Record:
        known = self.held.pop(ticket)
        if known is None:
            return self._drive(
                ops.complete(self.statements, Completion(ticket, result, codec, ttl))
            )
        # The claim's own row: the fenced update alone tells the new one (the store's clock is
        # ours), so the operation's generator is not entered.
        local = self._local  # _conn's common case, inline, and the claim's cursor
        cur = getattr(local, "cur", None)
        if cur is None or local.pid != Process.pid:
            cur = self._cursor()
        now = time.time()
        # fmt: off
        params = (now, result, codec, now, ttl, ticket.scope, ticket.key, ticket.owner,
                  ticket.fence, now)
        # fmt: on
        try:
            done = cur.execute(self.statements.complete_q, params)
        except BaseException as exc:
            self._cursor_failed(cur, exc)
            raise
        if done.rowcount == 1:
            return rules.completed(known, now, result=result, codec=codec, ttl=ttl)
        # Never holds again (fences only grow): the operation's own update misses too, then
        # reads the row for the error.
        return self._drive(ops.complete(self.statements, Completion(ticket, result, codec, ttl)))

    def fail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        known = self.held.pop(ticket)
        return self._drive(ops.fail(self.statements, ticket, error, ttl, known))

    def release(self, ticket: Ticket) -> None:
        self.held.pop(ticket)
        self._drive(ops.release(self.statements, ticket))

    def heartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        known = self.held.get(ticket)
        return self._drive(ops.heartbeat(self.statements, ticket, lease, ttl, known))

    def get(self, scope: str, key: str) -> Record | None:
        return self._drive(ops.get(self.statements, scope, key))

    def forget(self, scope: str, key: str) -> bool:
        return self._drive(ops.forget(self.statements, scope, key))

    def resolve(self, scope: str, key: str, how: Resolution) -> Record:
        return self._drive(ops.resolve(self.statements, scope, key, how))

    def add_audit(self, entry: AuditEntry) -> None:
        self._drive(ops.add_audit(self.statements, entry))

    async def aadd_audit(self, entry: AuditEntry) -> None:
        await self._offload(self.add_audit, entry)

    def audit_rows(self, query: AuditQuery) -> list[AuditRow]:
        return self._drive(ops.audit_rows(self.statements, query))

    async def aaudit_rows(self, query: AuditQuery) -> list[AuditRow]:
        return await self._offload(self.audit_rows, query)

    def unresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return self._drive(ops.unresolved(self.statements, scope, limit))

    def purge(self, limit: int | None = None) -> int:
        return self._delete_expired(time.time(), limit)

    def put_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        self._drive(ops.put_token(self.statements, scope, key, token, ttl))

    def take_token(self, scope: str, key: str, token: str) -> bool:
        return self._drive(ops.take_token(self.statements, scope, key, token))

    # -- LocalStore's primitives (the debounce window's read-decide-write runs on them) --------
    def _now(self) -> float:
        return time.time()

    def _transact(self, scope: str, key: str, step: Step[T]) -> T:
        return self._drive(transact(self.statements, scope, key, step))

    def _records(self) -> list[Record]:
        return self._drive(records(self.statements))

    def _delete_expired(self, now: float, limit: int | None) -> int:
        # ``now``: each range is judged at its own statement's clock, which only ever is later.
        return self._drive(purge(self.statements, limit, PURGE_BATCH, self.sweep))

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path}, table={self.table})"


# The URL options the store takes, and how each is read from text.
_URL_OPTIONS: dict[str, Any] = {
    "table": str,
    "timeout": float,
    "synchronous": str,
    "read_first": lambda v: v.lower() in ("1", "true", "yes", "on"),
    "inline": lambda v: v.lower() in ("1", "true", "yes", "on"),
    "auto_upgrade": lambda v: v.lower() in ("1", "true", "yes", "on"),
}


def sqlite_url(url: str) -> tuple[str, dict[str, Any]]:
    """The file and the options of a ``sqlite:///path.db?option=value`` URL; a URL without a
    file, or with an option the store does not take, is a ConfigurationError."""
    parts = urlsplit(url)
    path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    if not path or parts.netloc:
        raise ConfigurationError(
            f"SQLite URL needs a file: sqlite:///relative.db or sqlite:////abs/path.db ({url})"
        )
    options: dict[str, Any] = {}
    for name, values in parse_qs(parts.query).items():
        read = _URL_OPTIONS.get(name)
        if read is None:
            raise ConfigurationError(
                f"SQLite URL option {name!r} is not one the store takes: {', '.join(_URL_OPTIONS)}"
            )
        options[name] = read(values[-1])
    return path, options
