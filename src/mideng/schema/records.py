"""The record table and its steps table: PostgreSQL, MySQL/MariaDB and SQLite, one layout in
three spellings, as the changes of each migration.

Every store and the transactional mode read and write the same rows whatever the database, so
the columns are the Record's fields in order (``stores.record_table.rows``). Times are epoch
seconds in a double: Record times are floats, and comparing a lease with the database clock
needs no conversion. Indexes serve the operator paths: ``expires_at`` for purge, ``(status,
lease_until)`` for the unresolved view (on the servers; SQLite's table had none, see
``_sqlite``), and since version 3 the counts of the unresolved records (``unresolved_counted``).

The steps table holds one row per recorded step of a multi-step operation, keyed (scope, key,
step), and one (step ``''``) for the operation's arguments.
"""

from __future__ import annotations

from mideng.schema.changes import Change, Create, Index, RowCount
from mideng.schema.tables import steps_table

# Longest request id kept; MySQL needs a bound, and a trace id has no business being longer.
REQUEST_ID_MAX = 255
# The longest step id kept (a step's name and its call number); MySQL's key needs a bound.
STEP_MAX = 400


# -- version 1: the tables as mideng 0.1.0 made them -------------------------------------------
def tables(family: str, t: str) -> list[Change]:
    """The record table with its indexes, then its steps table."""
    if family == "postgresql":
        return [
            Create(_postgresql(t), t),
            Index(family, t, f"{t}_expires", "expires_at", "expires_at IS NOT NULL"),
            Index(
                family,
                t,
                f"{t}_open",
                "status, lease_until",
                "status IN ('processing', 'unknown')",
            ),
            Create(_steps(family, t), steps_table(t)),
        ]
    if family == "mysql":
        return [Create(_mysql(t), t), Create(_steps(family, t), steps_table(t))]
    return [Create(_sqlite(t), t), Create(_steps(family, t), steps_table(t))]


def _postgresql(t: str) -> str:
    return f"""CREATE TABLE IF NOT EXISTS {t} (
    scope text NOT NULL,
    key text NOT NULL,
    status text NOT NULL,
    fence bigint NOT NULL,
    owner text NOT NULL,
    fingerprint text,
    lease_until double precision,
    result bytea,
    codec text,
    error bytea,
    attempts integer NOT NULL DEFAULT 1,
    request_id text,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    expires_at double precision,
    PRIMARY KEY (scope, key)
)"""


def _mysql(t: str) -> str:
    # scope, key and owner are bytes: a case-insensitive or PAD SPACE collation would make
    # "Order:1", "order:1" and "order:1 " one key. The sizes fit the longest scope (with its
    # token:/hit: prefix) and key in utf-8 within InnoDB's 3072-byte key limit. MySQL 8 has no
    # CREATE INDEX IF NOT EXISTS: the indexes live in CREATE TABLE.
    return f"""CREATE TABLE IF NOT EXISTS {t} (
    scope VARBINARY(600) NOT NULL,
    `key` VARBINARY(1020) NOT NULL,
    status VARCHAR(16) NOT NULL,
    fence BIGINT NOT NULL,
    owner VARBINARY(255) NOT NULL,
    fingerprint VARCHAR(128) NULL,
    lease_until DOUBLE NULL,
    result LONGBLOB NULL,
    codec VARCHAR(64) NULL,
    error LONGBLOB NULL,
    attempts INT NOT NULL DEFAULT 1,
    request_id VARCHAR({REQUEST_ID_MAX}) NULL,
    created_at DOUBLE NOT NULL,
    updated_at DOUBLE NOT NULL,
    expires_at DOUBLE NULL,
    PRIMARY KEY (scope, `key`),
    KEY {t}_expires (expires_at),
    KEY {t}_open (status, lease_until)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""


def _sqlite(t: str) -> str:
    # WITHOUT ROWID: the primary key is the only way rows are found, so it is the table. No
    # secondary index: in WAL mode each one is another page written by both statements of every
    # first call (measured: about 12 µs each, more than the Guard's own Python), while purge
    # and the unresolved view, which they would serve, are operator paths that scan instead
    # (purge in bounded ranges of the primary key; see stores.sqlite.ops).
    return f"""CREATE TABLE IF NOT EXISTS {t} (
            scope TEXT NOT NULL, key TEXT NOT NULL, status TEXT NOT NULL,
            fence INTEGER NOT NULL, owner TEXT NOT NULL, fingerprint TEXT,
            lease_until REAL, result BLOB, codec TEXT, error BLOB,
            attempts INTEGER NOT NULL DEFAULT 1, request_id TEXT,
            created_at REAL NOT NULL, updated_at REAL NOT NULL, expires_at REAL,
            PRIMARY KEY (scope, key)) WITHOUT ROWID"""


def _steps(family: str, table: str) -> str:
    t = steps_table(table)
    if family == "postgresql":
        return (
            f"CREATE TABLE IF NOT EXISTS {t} (scope text NOT NULL, key text NOT NULL, "
            "step text NOT NULL, result bytea, codec text, at double precision NOT NULL, "
            "PRIMARY KEY (scope, key, step))"
        )
    if family == "mysql":
        return (
            f"CREATE TABLE IF NOT EXISTS {t} (scope VARBINARY(600) NOT NULL, "
            f"`key` VARBINARY(1020) NOT NULL, step VARBINARY({STEP_MAX}) NOT NULL, "
            "result LONGBLOB NULL, codec VARCHAR(64) NULL, at DOUBLE NOT NULL, "
            "PRIMARY KEY (scope, `key`, step)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 "
            "COLLATE=utf8mb4_bin"
        )
    return (
        f"CREATE TABLE IF NOT EXISTS {t} (scope TEXT NOT NULL, key TEXT NOT NULL, "
        "step TEXT NOT NULL, result BLOB, codec TEXT, at REAL NOT NULL, "
        "PRIMARY KEY (scope, key, step)) WITHOUT ROWID"
    )


# -- version 2: operations by the time they began ----------------------------------------------
def operations_begun(family: str, t: str) -> list[Change]:
    """The operator's list of operations (``mideng operations``, ``Guard.pending``) reads each
    operation's arguments row (step ``''``) oldest first: without an index every listing read
    the whole steps table and sorted it. Partial where the database has partial indexes, so a
    step's own row costs no index entry."""
    st = steps_table(t)
    if family == "mysql":
        return [Index(family, st, f"{st}_begun", "step, at")]
    return [Index(family, st, f"{st}_begun", "at", "step = ''")]


# -- version 3: the unresolved records counted through an index --------------------------------
#: The predicate of SQLite's partial index of unresolved records. SQLite uses a partial index
#: only for a query whose WHERE holds this very term, so the queries it serves write it out.
UNRESOLVED = "status IN ('processing', 'unknown', 'failed')"


def unresolved_counted(family: str, t: str) -> list[Change]:
    """``mideng stats``, the dashboard and the gauges count the processing, UNKNOWN and failed
    records exactly and estimate the succeeded bulk (``stores.record_table.survey``): the few
    unresolved ones are read through an index, never by a scan of the table.

    PostgreSQL already finds processing and UNKNOWN records by ``_open``; failed ones get a
    partial index holding what their count reads (an index-only scan). SQLite's table had no
    secondary index: one partial index on the three statuses, covering the survey's columns,
    so a record costs an index entry only while it is unresolved (a claim adds one and its
    success removes it), and the table's rows counted by triggers on insert and delete into a
    one-row table: SQLite cannot count a big table fast (its ``count(*)`` reads every page), it
    has one writer (no contention on the counter), and a claim's completion, an UPDATE, does
    not touch it (docs/benchmarks.md, "Operator counts", has what a first call pays).
    MySQL/MariaDB has no partial index and its ``_open`` index already
    holds every status with the primary key: nothing to add (every row would pay for a new
    one)."""
    if family == "postgresql":
        return [Index(family, t, f"{t}_failed", "scope, expires_at", "status = 'failed'")]
    if family == "sqlite":
        return [
            Index(
                family,
                t,
                f"{t}_unresolved",
                "status, lease_until, scope, key, expires_at, created_at, updated_at",
                UNRESOLVED,
            ),
            RowCount(t, rows_table(t)),
        ]
    return []


def rows_table(t: str) -> str:
    """SQLite's count of the record table's rows (version 3)."""
    return f"{t}_rows"
