"""SQLite store: the embedded default, safe across threads and processes sharing one file.

WAL lets readers run beside the single writer; every change is a ``BEGIN IMMEDIATE``
transaction, so the read-decide-write of a claim is atomic across processes. A claim whose
answer needs no write (a replay, a live holder) is answered from a plain snapshot read and never
queues for the write lock. Connections are per thread and per process (a fork reopens).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from mideng.core.decide import decide
from mideng.core.record import Claim, ClaimRequest, Record, Status, Ticket
from mideng.db.statements import check_table
from mideng.errors import ConfigurationError, StoreUnavailableError
from mideng.stores.base import KEEP, Step, T, is_unresolved, lease_lost
from mideng.stores.local_batch import LocalBatch
from mideng.stores.sql.rows import maybe_record, row_of
from mideng.stores.sql.schema import COLUMNS, DEFAULT_TABLE, ddl
from mideng.stores.sql.stats import SQLiteSurvey
from mideng.stores.sql.steps import SQLiteSteps
from mideng.stores.sql.table import RecordTable

# UPDATE/DELETE ... RETURNING arrived in SQLite 3.35; older libraries take the generic path.
_RETURNING = sqlite3.sqlite_version_info >= (3, 35)
# Only the fields a fenced transition reads matter; its output supplies the SET values.
_STAND_IN = Record(scope="", key="", status=Status.PROCESSING, fence=0, owner="", expires_at=0.0)


class SQLiteStore(LocalBatch, SQLiteSteps, SQLiteSurvey):
    def __init__(
        self,
        path: str,
        *,
        table: str = DEFAULT_TABLE,
        timeout: float = 30.0,
        synchronous: str = "NORMAL",
    ) -> None:
        check_table(table)
        if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ConfigurationError(f"synchronous must be OFF/NORMAL/FULL/EXTRA: {synchronous!r}")
        self.path = path
        self.url = f"sqlite:///{path}"
        self.table = table
        #: The transactional mode's way in: this store's records are rows of ``table``.
        self.record_table = RecordTable(table)
        self._timeout = timeout
        self._synchronous = synchronous.upper()
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        cols = ", ".join(COLUMNS)
        self._select = f"SELECT {cols} FROM {table} WHERE scope = ? AND key = ?"
        self._upsert = (
            f"INSERT OR REPLACE INTO {table} ({cols}) VALUES ({', '.join('?' * len(COLUMNS))})"
        )
        self._delete = f"DELETE FROM {table} WHERE scope = ? AND key = ?"
        self._insert_new = (
            f"INSERT OR IGNORE INTO {table} ({cols}) VALUES ({', '.join('?' * len(COLUMNS))})"
        )
        self._cols = cols
        self._conn()  # fail at open time, not on the first call, if the file is unusable

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteStore:
        parts = urlsplit(url)
        path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
        if not path or parts.netloc:
            raise ConfigurationError(
                f"SQLite URL needs a file: sqlite:///relative.db or sqlite:////abs/path.db ({url})"
            )
        for name, values in parse_qs(parts.query).items():
            options.setdefault(name, float(values[-1]) if name == "timeout" else values[-1])
        return cls(path, **options)

    # -- connections --------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            return conn
        try:
            conn = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
            for statement in ddl("sqlite", self.table):
                self._write_retrying(conn, statement)
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot open SQLite store {self.path}: {exc}") from exc
        self._local.conn, self._local.pid = conn, os.getpid()
        with self._all_lock:
            self._all.append(conn)
        return conn

    @staticmethod
    def _write_retrying(conn: sqlite3.Connection, statement: str) -> None:
        # Several processes creating the schema at once may see "database is locked" on the
        # WAL switch despite busy_timeout; the DDL is idempotent, so try again briefly.
        for attempt in range(50):
            try:
                conn.execute(statement)
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

    # -- the one primitive --------------------------------------------------------------------
    def _now(self) -> float:
        return time.time()

    def _transact(self, scope: str, key: str, step: Step[T]) -> T:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                current = maybe_record(conn.execute(self._select, (scope, key)).fetchone())
                answer, new = step(current, time.time())
                if new is None:
                    if current is not None:
                        conn.execute(self._delete, (scope, key))
                elif new is not KEEP:
                    conn.execute(self._upsert, row_of(new))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return answer
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"SQLite store {self.path} failed: {exc}") from exc

    def _snapshot(self, scope: str, key: str) -> Record | None:
        try:
            return maybe_record(self._conn().execute(self._select, (scope, key)).fetchone())
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"SQLite store {self.path} failed: {exc}") from exc

    def claim(self, req: ClaimRequest) -> Claim:
        now = time.time()
        current = self._snapshot(req.scope, req.key)
        claim, write = decide(current, req, now)
        if not write:
            # A decision that writes nothing is as true at the snapshot as under the lock.
            return claim
        if current is None and self._run(self._insert_new, row_of(claim.record)).rowcount == 1:
            # Absent at the snapshot: one autocommit INSERT, which loses cleanly to a racer.
            return claim
        return super().claim(req)

    # Fenced writes in one autocommit statement each. The WHERE clause is core.decide.holds; the
    # new values come from the core's own transition (completed / failed / renewed) applied to
    # a stand-in record, so this file restates no rule. Only "a record that never expires keeps
    # not expiring" (renewed) depends on the stored row, hence the CASE.
    def _fenced(self, ticket: Ticket, change: Callable[[Record, float], Record | None]) -> Record:
        if not _RETURNING:
            return super()._fenced(ticket, change)
        now = time.time()
        new = change(_STAND_IN.with_(owner=ticket.owner, fence=ticket.fence), now)
        holds = (
            "scope = ? AND key = ? AND owner = ? AND fence = ? AND status = 'processing' "
            "AND (expires_at IS NULL OR expires_at > ?)"
        )
        where = (ticket.scope, ticket.key, ticket.owner, ticket.fence, now)
        if new is None:
            sql = f"DELETE FROM {self.table} WHERE {holds} RETURNING {self._cols}"
            params: tuple[Any, ...] = where
        else:
            renewing = new.status is Status.PROCESSING
            sql = (
                f"UPDATE {self.table} SET status = ?, result = ?, codec = ?, error = ?, "
                "lease_until = ?, updated_at = ?, "
                "expires_at = CASE WHEN ? AND expires_at IS NULL THEN NULL ELSE ? END "
                f"WHERE {holds} RETURNING {self._cols}"
            )
            params = (
                new.status.value,
                new.result,
                new.codec,
                new.error,
                new.lease_until,
                now,
                renewing,
                new.expires_at,
                *where,
            )
        # fetchall: an autocommit statement with RETURNING commits once its rows are read.
        rows = self._run(sql, params).fetchall()
        if not rows:
            raise lease_lost(ticket, self._snapshot(ticket.scope, ticket.key))
        record = maybe_record(rows[0])
        assert record is not None
        return record

    def _run(self, sql: str, params: tuple[Any, ...]) -> sqlite3.Cursor:
        try:
            return self._conn().execute(sql, params)
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"SQLite store {self.path} failed: {exc}") from exc

    def get(self, scope: str, key: str) -> Record | None:
        current = self._snapshot(scope, key)
        return None if current is None or current.expired(time.time()) else current

    # -- operator views -----------------------------------------------------------------------
    def _query(self, sql: str, args: tuple[Any, ...]) -> list[Record]:
        try:
            rows = self._conn().execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"SQLite store {self.path} failed: {exc}") from exc
        return [r for r in map(maybe_record, rows) if r is not None]

    def _records(self) -> list[Record]:
        return self._query(f"SELECT {', '.join(COLUMNS)} FROM {self.table}", ())

    def unresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        now = time.time()
        sql = (
            f"SELECT {', '.join(COLUMNS)} FROM {self.table} "
            "WHERE status IN ('processing', 'unknown') AND (? IS NULL OR scope = ?) "
            "ORDER BY updated_at"
        )
        found = [r for r in self._query(sql, (scope, scope)) if is_unresolved(r, now)]
        return found[:limit]

    def _delete_expired(self, now: float, limit: int | None) -> int:
        sql = (
            f"DELETE FROM {self.table} WHERE (scope, key) IN (SELECT scope, key FROM "
            f"{self.table} WHERE expires_at <= ? LIMIT ?)"
        )
        try:
            cur = self._conn().execute(sql, (now, -1 if limit is None else limit))
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"SQLite store {self.path} failed: {exc}") from exc
        return cur.rowcount
