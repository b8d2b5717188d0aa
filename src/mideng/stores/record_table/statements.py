"""The SQL text of every record-table operation, per statement kind, built once per table.

Each statement is written once with ``:name`` binds (mideng.db.statements.Sql converts it for
every driver). Kinds are mideng.db.dialect's: postgresql, mariadb, mysql, sqlite.

How a claim is asked (measured; see docs/stores-sql.md):

- On the store's own PostgreSQL, MariaDB and MySQL 8 connections, in one of two orders, each
  two plain statements: read first (a duplicate costs one indexed read that takes no lock and
  writes nothing; a new key that read plus the insert) or insert first (a new key costs the
  insert alone; a duplicate the insert, which finds the key taken, plus the read). Any one
  statement that answers both cases costs more than either specialist: PostgreSQL's
  ``WITH … INSERT`` pays an insert plan on every duplicate, MariaDB re-parses a RETURNING on
  every new key. Which order is cheaper depends on whether the key is taken, so the store
  learns it per scope (``claims.ClaimOrder``). The insert is ``ON CONFLICT DO NOTHING
  RETURNING`` on PostgreSQL and ``INSERT IGNORE`` on MySQL/MariaDB, whose OK packet says both
  whether it inserted and the clock it stamped.
- Inside a caller's MySQL transaction the claim reads first, then inserts or locks
  (``INSERT … ON DUPLICATE KEY UPDATE <no-op>``) and takes the row as it then stands
  (RETURNING on MariaDB, ``SELECT … FOR UPDATE`` on MySQL 8): under REPEATABLE READ a plain
  read may show a snapshot older than the row the insert collides with.
- SQLite (the transactional mode) reads first.

When the row exists and core.decide says it must change (a take-over, a record turning
UNKNOWN), the write is a compare-and-set on the row exactly as it was read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mideng.core.record import Record
from mideng.db.dialect import is_mysql
from mideng.db.statements import Res, Sql, binds, check_table
from mideng.schema.audit import AuditStatements
from mideng.stores.record_table.rows import (
    current,
    mysql_current,
    mysql_packed,
    mysql_record,
    record,
)
from mideng.stores.record_table.schema import COLUMNS

# The statement's start time in epoch seconds, microsecond precision: the instant NOW(6) and
# UTC_TIMESTAMP(6) also read, without their calendar round trip (a third of the cost each) and
# independent of the session time zone.
_MYSQL_NOW = "@@timestamp"
# A write's clock, handed back in the OK packet (LAST_INSERT_ID(x) is MySQL's idiom for
# returning a value from an INSERT or UPDATE) as whole microseconds: ``_MYSQL_STAMPED`` is the
# same value for the row's other times, and lastrowid / 1e6 on the client, to the last bit.
_MYSQL_STAMPED = f"ROUND({_MYSQL_NOW} * 1e6) / 1e6"
_MYSQL_STAMP = f"LAST_INSERT_ID(ROUND({_MYSQL_NOW} * 1e6)) / 1e6"


class Statements:
    """All statements for one (kind, table); ``in_transaction``: for the transactional mode,
    on a caller's connection (whose flags are the caller's: no ``;``-joined texts there).

    ``current`` and ``record`` read this kind's rows (see ``rows``)."""

    current: Callable[[Sequence[Any], str, str], tuple[Record, float]]
    record: Callable[[Sequence[Any]], Record]

    def __init__(self, kind: str, table: str, *, in_transaction: bool = False) -> None:
        self.kind = kind
        self.table = t = check_table(table)
        self.mysql = is_mysql(kind)
        self.current = mysql_current if self.mysql else current
        self.record = mysql_record if self.mysql else record
        # On a caller's MySQL transaction, look before locking: InnoDB keeps a row lock until
        # the transaction ends (even past ROLLBACK TO SAVEPOINT), and a replay or a refusal
        # that held the record's row would stall its holder's completion for that long.
        self.look_first = in_transaction and self.mysql
        self.python_clock = kind == "sqlite"
        k = "`key`" if self.mysql else "key"
        self.cols = cols = ", ".join(k if c == "key" else c for c in COLUMNS)
        self.now = now = {
            "postgresql": "date_part('epoch', statement_timestamp())",
            "sqlite": ":now",
        }.get(kind, _MYSQL_NOW)
        # The database's clock on its own (the store's ``now``).
        self.clock = Sql(f"SELECT {now}")
        self.pk = pk = f"scope = :scope AND {k} = :key"
        lease, ttl = self.f("lease"), self.f("expiry_ttl")

        def fresh_row(created: str, at: str, verb: str = "INSERT") -> str:
            return (
                f"{verb} INTO {t} ({cols}) VALUES (:scope, :key, 'processing', 1, :owner, "
                f":fingerprint, {at} + {lease}, NULL, NULL, NULL, 1, :request_id, {created}, "
                f"{at}, {at} + {lease} + {ttl})"
            )

        fresh = fresh_row(now, now)

        # What a claim or a read returns: the row and the database clock (see rows.current).
        row = mysql_packed(now) if self.mysql else f"{cols.split(', ', 2)[2]}, {now}"
        self.select = Sql(f"SELECT {row} FROM {t} WHERE {pk}")
        # SQLStore's own read passes (scope, key) by position.
        assert self.python_clock or binds(self.select.text) == ["scope", "key"]
        # ``insert`` adds a fresh claim row and says whether it did, with the clock it was
        # stamped with (the rest of the row is ours). ``claim``, where set instead, inserts or
        # locks and returns the row as it then stands, whoever's it is.
        self.insert: Sql | None = None
        self.claim: list[Sql] | None = None
        if self.mysql:
            upsert = f"{fresh} ON DUPLICATE KEY UPDATE fence = fence"
            locked = f"SELECT {row} FROM {t} WHERE {pk} FOR UPDATE"
            if not in_transaction:
                # INSERT IGNORE tells an insert from a taken key by its affected rows (1 or 0,
                # FOUND_ROWS or not; an upsert's count is ambiguous under FOUND_ROWS), and
                # LAST_INSERT_ID(x) hands back the stamp in the same OK packet: no result set
                # to send and parse, on MariaDB and MySQL 8 alike. IGNORE would also turn a
                # value too long or a NULL into a warning; neither can occur: every column
                # holds the longest scope, key and request id the core admits, in bytes.
                self.insert = Sql(fresh_row(_MYSQL_STAMP, _MYSQL_STAMPED, "INSERT IGNORE"))
            else:
                self.claim = (
                    [Sql(f"{upsert} RETURNING {row}")]
                    if kind == "mariadb"
                    else [Sql(upsert), Sql(locked)]
                )
        else:
            self.insert = Sql(
                f"{fresh} ON CONFLICT (scope, key) DO NOTHING"
                + (" RETURNING created_at" if kind == "postgresql" else "")
            )
        self.cas = Sql(
            f"UPDATE {t} SET status = :status, fence = :fence, owner = :owner, "
            f"fingerprint = :fingerprint, lease_until = {self.f('lease_until')}, "
            f"result = :result, codec = :codec, error = :error, attempts = :attempts, "
            f"request_id = :request_id, created_at = {self.f('created_at')}, "
            f"updated_at = {self.f('updated_at')}, expires_at = {self.f('expires_at')} "
            f"WHERE {pk} AND fence = :was_fence AND owner = :was_owner "
            f"AND status = :was_status AND updated_at = {self.f('was_updated_at')}"
        )
        # An operator's release: the row deleted only if it is still the one they saw.
        self.cas_delete = Sql(
            f"DELETE FROM {t} WHERE {pk} AND fence = :was_fence AND owner = :was_owner "
            f"AND status = :was_status AND updated_at = {self.f('was_updated_at')}"
        )
        self.forget = Sql(f"DELETE FROM {t} WHERE {pk}")
        self._fenced()
        self._views()
        self._tokens_and_hits()
        self.begin, self.commit, self.rollback = Sql("BEGIN"), Sql("COMMIT"), Sql("ROLLBACK")
        # Operators' actions on this table's records (mideng.schema.audit).
        self.audit = AuditStatements(t)

    def stamped(self, res: Res, params: Mapping[str, Any]) -> float | None:
        """The clock an ``insert`` stamped its new row with; None if the key was taken."""
        if self.mysql:
            return res.lastrowid / 1e6 if res.rowcount == 1 else None
        if res.rowcount != 1:
            return None
        return float(res.rows[0][0]) if res.rows else float(params["now"])

    def f(self, name: str) -> str:
        """A float bind; PostgreSQL can't type a bare parameter in ``x IS NULL``."""
        return f"CAST(:{name} AS double precision)" if self.kind == "postgresql" else f":{name}"

    def _fenced(self) -> None:
        """Updates that only the live claim may make. Each stamps ``updated_at`` first and
        derives the other times from it, then reports that stamp: RETURNING on PostgreSQL, the
        connection's LAST_INSERT_ID on MySQL (its idiom for handing a value back from an
        UPDATE), the client clock on SQLite. With the claim's own row, that is enough to know
        the new row exactly without reading it back."""
        t, now = self.table, self.now
        if self.mysql:
            stamp, ref = _MYSQL_STAMP, "updated_at"
        else:
            stamp = ref = now
        tail = " RETURNING updated_at" if self.kind == "postgresql" else ""
        where = (
            f"WHERE {self.pk} AND owner = :owner AND fence = :fence "
            f"AND status = 'processing' AND (expires_at IS NULL OR expires_at > {now})"
        )
        ttl, lease = self.f("ttl"), self.f("lease")
        self.complete = Sql(
            f"UPDATE {t} SET updated_at = {stamp}, status = 'succeeded', result = :result, "
            f"codec = :codec, error = NULL, lease_until = NULL, expires_at = {ref} + {ttl} "
            f"{where}{tail}"
        )
        self.fail = Sql(
            f"UPDATE {t} SET updated_at = {stamp}, status = 'failed', error = :error, "
            f"result = NULL, codec = NULL, lease_until = NULL, expires_at = {ref} + {ttl} "
            f"{where}{tail}"
        )
        # expires_at reads its own old value: MySQL applies assignments left to right, but a
        # column not yet assigned still holds the row's value.
        self.heartbeat = Sql(
            f"UPDATE {t} SET updated_at = {stamp}, lease_until = {ref} + {lease}, "
            f"expires_at = CASE WHEN expires_at IS NULL OR {ttl} IS NULL THEN NULL "
            f"ELSE {ref} + {lease} + {ttl} END {where}{tail}"
        )
        self.release = Sql(f"DELETE FROM {t} {where}")

    def _views(self) -> None:
        t, now, cols = self.table, self.now, self.cols
        open_ = (
            f"status IN ('processing', 'unknown') "
            f"AND (expires_at IS NULL OR expires_at > {now}) "
            f"AND (status = 'unknown' OR lease_until IS NULL OR lease_until <= {now})"
        )
        self.unresolved_all = Sql(
            f"SELECT {cols} FROM {t} WHERE {open_} ORDER BY updated_at LIMIT :limit"
        )
        self.unresolved_scope = Sql(
            f"SELECT {cols} FROM {t} WHERE scope = :scope AND {open_} "
            f"ORDER BY updated_at LIMIT :limit"
        )
        # A purge follows the ``expires_at`` index from where its last batch ended, so no
        # batch reads again what the ones before it deleted. ``purge_keys``, where set, chooses
        # a batch and ``purge`` deletes it; otherwise ``purge`` does both.
        self.purge_keys: Sql | None = None
        if self.kind == "postgresql":
            # SKIP LOCKED: a row that a claim is taking over right now is not garbage. The
            # batch is chosen once, in a MATERIALIZED CTE (as an IN (subquery) it can be
            # rescanned per row, taking new rows each time); ORDER BY makes the planner walk
            # the index rather than the heap, where expired rows may all sit at the end.
            # The index holds the expiry alone, so a batch resumes at the last expiry chosen
            # (``:at``). The DELETE finds the chosen rows by their ctid (a TID scan, which
            # FOR UPDATE has pinned to the row's current version): joined on the key, the
            # planner may hash the whole table, or all its expired rows, once per batch.
            # Answers (rows deleted, rows chosen, the last expiry chosen).
            due = f"expires_at <= {now} AND expires_at >= :at"
            self.purge = Sql(
                f"WITH doomed AS MATERIALIZED (SELECT ctid, expires_at FROM {t} "
                f"WHERE {due} ORDER BY expires_at LIMIT :batch FOR UPDATE SKIP LOCKED), "
                f"gone AS (DELETE FROM {t} WHERE ctid = ANY (ARRAY(SELECT ctid FROM doomed)) "
                f"AND expires_at <= {now} RETURNING 1) "
                f"SELECT (SELECT count(*) FROM gone), count(*), max(expires_at) FROM doomed"
            )
        else:
            # InnoDB's secondary index holds the primary key after the expiry, so (expires_at,
            # scope, key) is the index's own order and names one entry: a batch reads the next
            # :batch entries after the last one chosen, from the index alone and without a
            # lock, then deletes that bounded range of the index, re-checking the expiry (a
            # row renewed in between has left the range). A DELETE … ORDER BY … LIMIT would
            # start at the index's first entry every time and step again over the entries
            # its predecessors delete-marked, which InnoDB removes only later.
            k = "`key`"
            after = (
                f"(expires_at > :at OR (expires_at = :at AND "
                f"(scope > :scope OR (scope = :scope AND {k} > :key))))"
            )
            upto = (
                f"(expires_at < :last_at OR (expires_at = :last_at AND "
                f"(scope < :last_scope OR (scope = :last_scope AND {k} <= :last_key))))"
            )
            self.purge_keys = Sql(
                f"SELECT expires_at, scope, {k} FROM {t} FORCE INDEX ({t}_expires) "
                f"WHERE expires_at <= {now} AND expires_at >= :at AND {after} "
                f"ORDER BY expires_at, scope, {k} LIMIT :batch"
            )
            self.purge = Sql(
                f"DELETE FROM {t} WHERE expires_at <= {now} "
                f"AND expires_at BETWEEN :at AND :last_at AND {after} AND {upto}"
            )

    def _tokens_and_hits(self) -> None:
        """Tokens and debounce windows: SUCCEEDED rows in their own scope namespace."""
        t, now, pk, cols = self.table, self.now, self.pk, self.cols

        def entry(owner: str, result: str, codec: str, life: str, alias: str = "") -> str:
            into = f"{t} AS {alias}" if alias else t
            return (
                f"INSERT INTO {into} ({cols}) VALUES (:scope, :key, 'succeeded', 0, {owner}, "
                f"NULL, NULL, {result}, {codec}, NULL, 1, NULL, {now}, {now}, "
                f"{now} + {self.f(life)})"
            )

        token = entry(":owner", "NULL", "NULL", "ttl")
        if self.kind == "postgresql":
            replace = ", ".join(f"{c} = EXCLUDED.{c}" for c in COLUMNS[2:])
            self.put_token = Sql(f"{token} ON CONFLICT (scope, key) DO UPDATE SET {replace}")
            # The no-op update takes the row lock, inserting the row first if need be.
            self.hit_lock = [
                Sql(
                    f"{entry(repr(''), ':empty', repr('json'), 'window', 'r')} "
                    f"ON CONFLICT (scope, key) DO UPDATE SET fence = r.fence "
                    f"RETURNING result, {now}"
                )
            ]
        else:
            self.put_token = Sql(token.replace("INSERT INTO", "REPLACE INTO", 1))
            upsert = (
                f"{entry(repr(''), ':empty', repr('json'), 'window')} "
                f"ON DUPLICATE KEY UPDATE fence = fence"
            )
            read = f"SELECT result, {now} FROM {t} WHERE {pk} FOR UPDATE"
            self.hit_lock = (
                [Sql(f"{upsert} RETURNING result, {now}")]
                if self.kind == "mariadb"
                else [Sql(f"{upsert}; {read}", sets=2)]
            )
        self.take_token = Sql(
            f"DELETE FROM {t} WHERE {pk} AND owner = :owner AND expires_at > {now}"
        )
        self.hit_store = Sql(
            f"UPDATE {t} SET result = :result, updated_at = {self.f('now')}, "
            f"expires_at = {self.f('now')} + {self.f('window')} WHERE {pk}"
        )
