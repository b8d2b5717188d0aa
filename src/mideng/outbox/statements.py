"""The outbox's SQL texts per statement kind, written once each.

``Queries(kind, table)`` holds every text the writer and the relay send. PostgreSQL and SQLite
claim with one ``UPDATE … WHERE … IN (SELECT …)`` (PostgreSQL's sub-select takes ``FOR UPDATE
SKIP LOCKED`` so two relays never wait on each other's rows); MySQL/MariaDB cannot update a
table it selects from in a sub-select, so there the claim is a locking ``SELECT … SKIP LOCKED``
and an ``UPDATE`` of what it returned, in the same transaction. Lists of ids are spelled with
one bind each; their texts are built once per length and kept.

On MySQL/MariaDB every statement that changes or locks rows named by a list reaches them
through the primary key (``FORCE INDEX (PRIMARY)``, or one ``DELETE`` per key): on a small
table InnoDB would rather scan it, and a scan asks for the lock of every row it passes, those
a writer holds included. With ``nowait`` (MariaDB) the relay's locking reads of key rows are
``FOR UPDATE NOWAIT`` over a list read beforehand without locks: MariaDB's ``SKIP LOCKED``
queues for a held row for an instant before it skips it, and a deadlock search in that
instant sees a cycle; ``NOWAIT`` fails the read instead, without queueing (docs/outbox.md,
deadlocks).
"""

from __future__ import annotations

from mideng.db.statements import Sql, check_table
from mideng.errors import ConfigurationError
from mideng.outbox.schema import DEAD, PENDING, SENT, keys_table
from mideng.schema.audit import AuditStatements

#: The columns the relay reads of a row, in this order (``ops.Row``).
ROW_COLUMNS = "id, aggregateid, seq, destination, payload, headers, attempts"
#: Why a row is still pending (``Queries.left`` answers the index): due now, waiting for its
#: retry time, leased to a relay, or below its key's mark (no relay publishes it again).
#: The columns an operator sees of a row (``dead.OutboxRow``), in this order.
SEEN_COLUMNS = "id, destination, aggregateid, seq, state, attempts, last_error, created_at"
WHY_LEFT = ("due", "retrying", "leased", "stuck")
_DUE = "(claimed_until IS NULL OR claimed_until < :now)"


def _left(table: str, keys: str) -> Sql:
    """Pending rows counted by why they are (``WHY_LEFT``), and the soonest time a lease or a
    retry time of each group ends. A row's lease is its key's, or an unkeyed row's own (a keyed
    row has none of its own, an unkeyed one no key row)."""
    holder = "COALESCE(k.claimed_by, o.claimed_by)"
    until = "COALESCE(k.claimed_until, o.claimed_until)"
    why = {name: n for n, name in enumerate(WHY_LEFT)}
    return Sql(
        f"SELECT CASE WHEN o.seq <= k.sent_seq THEN {why['stuck']} "
        f"WHEN {until} IS NULL OR {until} < :now THEN {why['due']} "
        f"WHEN {holder} IS NULL THEN {why['retrying']} ELSE {why['leased']} END AS why, "
        f"COUNT(*), MIN({until}) FROM {table} o LEFT JOIN {keys} k "
        f"ON k.aggregateid = o.aggregateid WHERE o.state = {PENDING} GROUP BY why"
    )


def _claims(kind: str, t: str, k: str, due_keys: str, due_rows: str, lock: str) -> tuple[Sql, Sql]:
    """PostgreSQL's and SQLite's claims of keys and of unkeyed rows, one statement each.
    RETURNING: the write-back needs the keys a batch holds (MySQL's locking read says), and
    each key or row comes with its holder before (``d``, read as the claim locked it)."""
    if kind == "postgresql":
        returned = ", ".join(f"u.{c}" for c in ROW_COLUMNS.split(", "))
        return (
            Sql(
                f"UPDATE {k} AS u SET claimed_by = :token, claimed_until = :until "
                f"FROM ({due_keys}{lock}) AS d WHERE u.aggregateid = d.aggregateid "
                "RETURNING u.aggregateid, d.claimed_by"
            ),
            Sql(
                f"UPDATE {t} AS u SET claimed_by = :token, claimed_until = :until "
                f"FROM ({due_rows.format('id, claimed_by')}{lock}) AS d WHERE u.id = d.id "
                f"RETURNING {returned}, d.claimed_by"
            ),
        )
    # SQLite's RETURNING sees no FROM table, only the updated row: the holders before come
    # from a CTE materialized once, before the update changes them.
    return (
        Sql(
            f"WITH d AS MATERIALIZED ({due_keys}) "
            f"UPDATE {k} SET claimed_by = :token, claimed_until = :until "
            "WHERE aggregateid IN (SELECT aggregateid FROM d) RETURNING aggregateid, "
            f"(SELECT d.claimed_by FROM d WHERE d.aggregateid = {k}.aggregateid)"
        ),
        Sql(
            f"WITH d AS MATERIALIZED ({due_rows.format('id, claimed_by')}) "
            f"UPDATE {t} SET claimed_by = :token, claimed_until = :until "
            f"WHERE id IN (SELECT id FROM d) RETURNING {ROW_COLUMNS}, "
            f"(SELECT d.claimed_by FROM d WHERE d.id = {t}.id)"
        ),
    )


class Queries:
    def __init__(self, kind: str, table: str, *, nowait: bool = False) -> None:
        if kind not in ("postgresql", "mariadb", "mysql", "sqlite"):
            raise ConfigurationError(f"the outbox has no statements for {kind!r}")
        self.kind = kind
        self.table = t = check_table(table)
        self.keys = k = keys_table(table)
        # Operators' actions on this outbox's rows (mideng.schema.audit).
        self.audit = AuditStatements(t)
        self.mysql = kind in ("mariadb", "mysql")
        self.nowait = nowait and self.mysql
        lock = " FOR UPDATE SKIP LOCKED" if kind != "sqlite" else ""
        # The index hint that keeps a by-list statement on its own rows (module docstring).
        self._by_pk = " FORCE INDEX (PRIMARY)" if self.mysql else ""
        self._lists: dict[tuple[str, int], Sql] = {}

        # -- writer ----------------------------------------------------------------------
        if self.mysql:
            bump = "ON DUPLICATE KEY UPDATE last_seq = last_seq + 1, pending = 1"
        else:
            bump = (
                f"ON CONFLICT (aggregateid) DO UPDATE SET last_seq = {k}.last_seq + 1, pending = 1"
            )
        self.bump_key = Sql(
            f"INSERT INTO {k} (aggregateid, last_seq, sent_seq, pending) "
            f"VALUES (:key, 1, 0, 1) {bump}"
        )
        columns = (
            "id, aggregatetype, aggregateid, type, payload, destination, headers, request_id, "
            "seq, created_at"
        )
        values = ":id, :destination, :key, :type, :payload, :destination, :headers, :request_id"
        # The key from its row, not its bind: PostgreSQL types one bind once, and here it would
        # be text in the select list and varchar in the WHERE.
        keyed = values.replace(":key", "aggregateid")
        self.insert_keyed = Sql(
            f"INSERT INTO {t} ({columns}) SELECT {keyed}, last_seq, :created_at FROM {k} "
            "WHERE aggregateid = :key"
        )
        self.insert_unkeyed = Sql(
            f"INSERT INTO {t} ({columns}) VALUES ({values}, NULL, :created_at)"
        )

        # -- relay: claim ------------------------------------------------------------------
        # Each claim also answers who held what it took before: a due key or row still
        # claimed_by a token was let go by no relay (one that died or stalled past its lease),
        # and the relay says it took it over (mideng.outbox.ops.claim).
        due_keys = (
            f"SELECT aggregateid, claimed_by FROM {k} WHERE pending = 1 AND {_DUE} LIMIT :limit"
        )
        due_rows = (
            f"SELECT {{}} FROM {t} WHERE aggregateid IS NULL AND state = {PENDING} AND {_DUE} "
            "LIMIT :limit"
        )
        # MySQL/MariaDB: a locking select, then an update of what it returned.
        self.select_keys = Sql(due_keys + lock)
        # With ``nowait``: the keys due, read without a lock, to lock by key (``lock_due``).
        self.due_keys = Sql(due_keys)
        self.select_rows = Sql(due_rows.format(f"{ROW_COLUMNS}, claimed_by") + lock)
        # PostgreSQL and SQLite: one statement each (``_claims``).
        self.claim_keys, self.claim_rows = _claims(kind, t, k, due_keys, due_rows, lock)
        self.read_keyed = Sql(
            f"SELECT {', '.join('o.' + c for c in ROW_COLUMNS.split(', '))} FROM {t} o "
            f"JOIN {k} k ON k.aggregateid = o.aggregateid "
            f"WHERE k.claimed_by = :token AND o.seq > k.sent_seq AND o.state = {PENDING} "
            # By rank within the key first: a cut-off batch then holds a head of every key
            # (all keys publish side by side) rather than all of a few keys.
            "ORDER BY o.seq - k.sent_seq, o.aggregateid LIMIT :limit"
        )

        # -- relay: settle -----------------------------------------------------------------
        # A row's write-back lands only while the batch still holds the row: an unkeyed row by
        # its own lease, a keyed row by its key's. Without it, a relay stalled past its lease
        # (a stopped process, a publish that outlived the lease) writes over what the relay
        # that took the key over has written since: its failure puts a sent row back to
        # pending below its key's mark, where nothing publishes, purges or counts it again.
        # The key row is read, not locked (a sub-select in an UPDATE is a consistent read on
        # PostgreSQL, and on InnoDB in READ COMMITTED), so this waits for no writer holding it.
        held = (
            f"(claimed_by = :token OR EXISTS (SELECT 1 FROM {k} "
            f"WHERE {k}.aggregateid = {t}.aggregateid AND {k}.claimed_by = :token))"
        )
        self._held = held
        # The key rows a write-back may change now: a writer holding one (its transaction
        # bumped the key and goes on to lock others) is skipped, never waited for, so the
        # write-back holds no key row while it waits on another (docs/outbox.md, deadlocks).
        # PostgreSQL finds them by token; MySQL/MariaDB by the batch's keys (``in_list``).
        # SQLite has no row locks to wait on: its writers take the file's lock.
        self.lock_keys = (
            Sql(f"SELECT aggregateid FROM {k} WHERE claimed_by = :token{lock}")
            if kind != "sqlite"
            else None
        )
        self.still_claimed = Sql(f"SELECT aggregateid FROM {k} WHERE claimed_by = :token")
        # PostgreSQL takes a batch's ids as one array: one text for any count, where a list of
        # binds is a new text per count, which SQLAlchemy and psycopg each parse and cache
        # (tens of milliseconds of the relay's own Python for 2,000 ids, on the thread that
        # publishes).
        self.sent_array = Sql(
            f"UPDATE {t} SET state = {SENT}, sent_at = :now, claimed_by = NULL, "
            f"claimed_until = NULL WHERE id = ANY(:ids) AND {held}"
        )
        self.failed = Sql(
            f"UPDATE {t} SET attempts = :attempts, last_error = :error, state = :state, "
            f"claimed_by = NULL, claimed_until = :retry_at WHERE id = :id AND {held}"
        )
        # Rows a relay published form a prefix of the key's unsent rows (it publishes a key in
        # order and stops at its first failure), so the highest finished one is the new mark.
        # A requeued row (``requeue_row``) is pending behind rows sent after it: the mark
        # then stops below the first row still pending above it, so a requeued row that
        # fails again is retried, not left below the mark. Without one, the two are the same.
        self._advance = (
            f"SET sent_seq = COALESCE((SELECT MIN(o.seq) - 1 FROM {t} o "
            f"WHERE o.aggregateid = {k}.aggregateid AND o.state = {PENDING} "
            f"AND o.seq > {k}.sent_seq), (SELECT MAX(o.seq) FROM {t} o "
            f"WHERE o.aggregateid = {k}.aggregateid AND o.state <> {PENDING}), sent_seq)"
        )
        self.advance = Sql(f"UPDATE {k} {self._advance} WHERE claimed_by = :token")
        self.back_off = Sql(
            f"UPDATE {k} SET claimed_by = NULL, claimed_until = :retry_at "
            "WHERE aggregateid = :key AND claimed_by = :token"
        )
        self._release = (
            "SET pending = CASE WHEN last_seq > sent_seq THEN 1 ELSE 0 END, "
            "claimed_by = NULL, claimed_until = NULL"
        )
        self.release = Sql(f"UPDATE {k} {self._release} WHERE claimed_by = :token")

        # -- relay: retention ----------------------------------------------------------------
        self.purge_rows = Sql(f"DELETE FROM {t} WHERE state = {SENT} AND sent_at < :cutoff")
        idle = (
            f"pending = 0 AND claimed_by IS NULL AND NOT EXISTS "
            f"(SELECT 1 FROM {t} o WHERE o.aggregateid = {k}.aggregateid)"
        )
        self._idle = idle
        self.purge_keys = Sql(f"DELETE FROM {k} WHERE {idle}")
        self.idle_keys = Sql(f"SELECT aggregateid FROM {k} WHERE {idle}")  # ``nowait``
        # InnoDB takes no index hint in a DELETE: one statement per key is a lookup by key.
        self.purge_key = Sql(f"DELETE FROM {k} WHERE aggregateid = :key")
        # As in a write-back: the idle key rows no writer holds, locked, then deleted by
        # primary key, so the purge never holds a deleted key row while it waits for another.
        self.lock_idle_keys = (
            Sql(f"SELECT aggregateid FROM {k} WHERE {idle}{lock}") if kind != "sqlite" else None
        )
        self._operators()
        self.left = _left(t, k)
        self.count = Sql(
            f"SELECT state, COUNT(*) FROM {t} WHERE state IN ({PENDING}, {SENT}, {DEAD}) "
            "GROUP BY state"
        )

    def _operators(self) -> None:
        """An operator's statements: dead rows listed and requeued (mideng.outbox.dead)."""
        t, k = self.table, self.keys
        dead = f"SELECT {SEEN_COLUMNS} FROM {t} WHERE state = {DEAD}"
        self.dead_all = Sql(f"{dead} ORDER BY created_at, id LIMIT :limit")
        self.dead_to = Sql(
            f"{dead} AND destination = :destination ORDER BY created_at, id LIMIT :limit"
        )
        # Only while it is still dead after the attempts the operator saw: from its first
        # attempt again, its last error kept until a publish writes another.
        self.requeue_row = Sql(
            f"UPDATE {t} SET state = {PENDING}, attempts = 0, claimed_by = NULL, "
            f"claimed_until = NULL WHERE id = :id AND state = {DEAD} AND attempts = :attempts"
        )
        # Its key's mark moved back below it, so the relay publishes it before the key's
        # rows still pending behind it (those sent meanwhile are not sent again).
        self.requeue_key = Sql(
            f"UPDATE {k} SET sent_seq = CASE WHEN sent_seq >= :seq THEN :seq - 1 "
            "ELSE sent_seq END, pending = 1 WHERE aggregateid = :key"
        )
        # MySQL/MariaDB: READ COMMITTED as the relay's transactions (mideng.outbox.relay).
        self.begin = [Sql("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")] if self.mysql else []
        self.begin.append(Sql("BEGIN"))
        self.commit = Sql("COMMIT")
        self.rollback = Sql("ROLLBACK")

    def in_list(self, name: str, count: int) -> Sql:
        """``name``'s text for ``count`` ids, bound as ``:i0 … :i{count-1}``."""
        known = self._lists.get((name, count))
        if known is not None:
            return known
        binds = ", ".join(f":i{n}" for n in range(count))
        t, k = f"{self.table}{self._by_pk}", f"{self.keys}{self._by_pk}"
        texts = {
            "claim_keys": f"UPDATE {k} SET claimed_by = :token, claimed_until = :until "
            f"WHERE aggregateid IN ({binds})",
            "claim_rows": f"UPDATE {t} SET claimed_by = :token, claimed_until = :until "
            f"WHERE id IN ({binds})",
            "sent": f"UPDATE {t} SET state = {SENT}, sent_at = :now, claimed_by = NULL, "
            f"claimed_until = NULL WHERE id IN ({binds}) AND {self._held}",
            # MySQL/MariaDB: a batch's key rows still leased to its token and held by no
            # writer, looked up by key, so the locking read tries no other key row.
            "lock_keys": f"SELECT aggregateid FROM {k} WHERE aggregateid IN ({binds}) "
            f"AND claimed_by = :token FOR UPDATE {'NOWAIT' if self.nowait else 'SKIP LOCKED'}",
            # ``nowait``: keys read as due, or as idle, locked if they still are.
            "lock_due": f"SELECT aggregateid FROM {k} WHERE aggregateid IN ({binds}) "
            f"AND pending = 1 AND {_DUE} FOR UPDATE NOWAIT",
            "lock_idle": f"SELECT aggregateid FROM {k} WHERE aggregateid IN ({binds}) "
            f"AND {self._idle} FOR UPDATE NOWAIT",
            # Key rows this transaction locked as idle (``lock_idle_keys``), PostgreSQL.
            "purge_keys": f"DELETE FROM {self.keys} WHERE aggregateid IN ({binds})",
            # Key rows this transaction locked (``lock_keys``): by primary key alone.
            "advance": f"UPDATE {k} {self._advance} WHERE aggregateid IN ({binds})",
            "release": f"UPDATE {k} {self._release} WHERE aggregateid IN ({binds})",
            # Rows an operator names, in whatever state they are now.
            "seen": f"SELECT {SEEN_COLUMNS} FROM {self.table} WHERE id IN ({binds})",
        }
        sql = self._lists[(name, count)] = Sql(texts[name])
        return sql
