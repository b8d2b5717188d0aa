"""All DDL of the record table: PostgreSQL, MySQL/MariaDB and SQLite, one layout in three
spellings.

Every store and the transactional mode read and write the same rows whatever the database, so
the columns are the Record's fields in order (see ``rows``). Times are epoch seconds in a
double: Record times are floats, and comparing a lease with the database clock needs no
conversion. Two indexes serve the operator paths: ``expires_at`` for purge, ``(status,
lease_until)`` for the unresolved view (on the servers; SQLite's table has none, see
``_sqlite``).
"""

from __future__ import annotations

from mideng.core.record import RECORD_FIELDS
from mideng.db.statements import Op, Sql, Stmt, check_table
from mideng.errors import ConfigurationError

COLUMNS = RECORD_FIELDS
DEFAULT_TABLE = "mideng_records"
KINDS = ("postgresql", "mysql", "sqlite")

# Longest request id kept; MySQL needs a bound, and a trace id has no business being longer.
REQUEST_ID_MAX = 255


def ddl(kind: str, table: str) -> list[str]:
    """The statements that create the record table and its indexes, each idempotent."""
    check_table(table)
    if kind == "postgresql":
        return _postgresql(table)
    if kind == "mysql":
        return _mysql(table)
    if kind == "sqlite":
        return _sqlite(table)
    raise ConfigurationError(f"no schema for {kind!r}; known: {', '.join(KINDS)}")


def script(kind: str, table: str) -> str:
    """The DDL as one text a person can read or pipe into psql / mysql / sqlite3."""
    return "".join(f"{statement};\n" for statement in ddl(kind, table))


def create(kind: str, table: str) -> Op[None]:
    """The DDL as an operation, safe to run from many processes at once."""
    statements = [Stmt(Sql(text)) for text in ddl(kind, table)]
    if kind == "postgresql":
        # Concurrent CREATE … IF NOT EXISTS can still collide in PostgreSQL's catalog: one
        # creator at a time per table name.
        statements = [
            Stmt(Sql("BEGIN")),
            Stmt(Sql("SELECT pg_advisory_xact_lock(hashtext(:name))"), {"name": f"mideng:{table}"}),
            *statements,
            Stmt(Sql("COMMIT")),
        ]
    for stmt in statements:  # noqa: UP028 - a generator that receives results, not a relay
        yield stmt


def _postgresql(t: str) -> list[str]:
    return [
        f"""CREATE TABLE IF NOT EXISTS {t} (
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
)""",
        f"CREATE INDEX IF NOT EXISTS {t}_expires ON {t} (expires_at) WHERE expires_at IS NOT NULL",
        f"CREATE INDEX IF NOT EXISTS {t}_open ON {t} (status, lease_until)"
        " WHERE status IN ('processing', 'unknown')",
    ]


def _mysql(t: str) -> list[str]:
    # scope, key and owner are bytes: a case-insensitive or PAD SPACE collation would make
    # "Order:1", "order:1" and "order:1 " one key. The sizes fit the longest scope (with its
    # token:/hit: prefix) and key in utf-8 within InnoDB's 3072-byte key limit.
    return [
        f"""CREATE TABLE IF NOT EXISTS {t} (
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
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    ]


def _sqlite(t: str) -> list[str]:
    # WITHOUT ROWID: the primary key is the only way rows are found, so it is the table. No
    # secondary index: in WAL mode each one is another page written by both statements of every
    # first call (measured: about 12 µs each, more than the Guard's own Python), while purge
    # and the unresolved view, which they would serve, are operator paths that scan instead
    # (purge in bounded ranges of the primary key; see stores.sql.embedded).
    return [
        f"""CREATE TABLE IF NOT EXISTS {t} (
            scope TEXT NOT NULL, key TEXT NOT NULL, status TEXT NOT NULL,
            fence INTEGER NOT NULL, owner TEXT NOT NULL, fingerprint TEXT,
            lease_until REAL, result BLOB, codec TEXT, error BLOB,
            attempts INTEGER NOT NULL DEFAULT 1, request_id TEXT,
            created_at REAL NOT NULL, updated_at REAL NOT NULL, expires_at REAL,
            PRIMARY KEY (scope, key)) WITHOUT ROWID""",
    ]
