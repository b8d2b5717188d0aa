"""All DDL of the outbox: its rows table and its per-key table, in three spellings.

The rows table keeps Debezium's outbox event router columns (``id``, ``aggregatetype``,
``aggregateid``, ``type``, ``payload``) so a move to change data capture keeps the table; the
relay's own columns follow. Times are epoch seconds in a double, as in the record table.

The per-key table (``<table>_keys``) is what orders a key: ``add`` bumps the key's
``last_seq`` under the key row's lock, so a key's sequence numbers are handed out in the order
its transactions commit (a second writer of the key waits for the first to end, and a rollback
takes its number back). The relay leases a key row (``claimed_by`` / ``claimed_until``) to be
the only one publishing that key, and moves ``sent_seq`` forward as it goes.

On PostgreSQL a statement trigger NOTIFYs the channel named after the table when rows are
inserted; PostgreSQL delivers it only when the transaction commits, which is exactly when the
relay has something to do.
"""

from __future__ import annotations

from mideng.db.statements import check_table
from mideng.errors import ConfigurationError

DEFAULT_TABLE = "mideng_outbox"
#: The widest destination, key, type and request id kept (MySQL needs bounds on indexed text).
NAME_MAX = 255

PENDING, SENT, DEAD = 0, 1, 2


def keys_table(table: str) -> str:
    return f"{check_table(table)}_keys"


def channel(table: str) -> str:
    """The LISTEN/NOTIFY channel of a table (PostgreSQL)."""
    return check_table(table)


def ddl(kind: str, table: str) -> list[str]:
    """The statements that create both tables, their indexes and (PostgreSQL) the trigger,
    each safe to run again."""
    check_table(table)
    if kind == "postgresql":
        return _postgresql(table)
    if kind in ("mysql", "mariadb"):
        return _mysql(table)
    if kind == "sqlite":
        return _sqlite(table)
    raise ConfigurationError(f"no outbox schema for {kind!r}")


def script(kind: str, table: str) -> str:
    """The DDL as one text a person can read or pipe into psql / mysql / sqlite3."""
    return "".join(f"{statement};\n" for statement in ddl(kind, table))


def _rows(table: str, blob: str, double: str, text: str, bigint: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {table} ("
        f"id VARCHAR(36) NOT NULL PRIMARY KEY, "
        f"aggregatetype VARCHAR({NAME_MAX}) NOT NULL, "
        f"aggregateid VARCHAR({NAME_MAX}) NULL, "
        f"type VARCHAR({NAME_MAX}) NOT NULL, "
        f"payload {blob} NOT NULL, "
        f"destination VARCHAR({NAME_MAX}) NOT NULL, "
        f"headers {text} NOT NULL, "
        f"request_id VARCHAR({NAME_MAX}) NULL, "
        f"seq {bigint} NULL, "
        f"created_at {double} NOT NULL, "
        f"state SMALLINT NOT NULL DEFAULT {PENDING}, "
        f"attempts INTEGER NOT NULL DEFAULT 0, "
        f"last_error {text} NULL, "
        f"sent_at {double} NULL, "
        f"claimed_by VARCHAR(36) NULL, "
        f"claimed_until {double} NULL"
    )


def _keys(table: str, double: str, bigint: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {keys_table(table)} ("
        f"aggregateid VARCHAR({NAME_MAX}) NOT NULL PRIMARY KEY, "
        f"last_seq {bigint} NOT NULL, "
        f"sent_seq {bigint} NOT NULL DEFAULT 0, "
        f"pending SMALLINT NOT NULL DEFAULT 1, "
        f"claimed_by VARCHAR(36) NULL, "
        f"claimed_until {double} NULL"
    )


def _postgresql(table: str) -> list[str]:
    keys = keys_table(table)
    return [
        _rows(table, "BYTEA", "DOUBLE PRECISION", "TEXT", "BIGINT") + ")",
        f"CREATE UNIQUE INDEX IF NOT EXISTS {table}_key_seq ON {table} (aggregateid, seq)",
        f"CREATE INDEX IF NOT EXISTS {table}_unkeyed ON {table} (claimed_until) "
        f"WHERE aggregateid IS NULL AND state = {PENDING}",
        f"CREATE INDEX IF NOT EXISTS {table}_sent ON {table} (sent_at) WHERE state = {SENT}",
        _keys(table, "DOUBLE PRECISION", "BIGINT") + ")",
        f"CREATE INDEX IF NOT EXISTS {keys}_pending ON {keys} (claimed_until) WHERE pending = 1",
        f"CREATE INDEX IF NOT EXISTS {keys}_claim ON {keys} (claimed_by)",
        f"CREATE OR REPLACE FUNCTION {table}_notify() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN PERFORM pg_notify('{channel(table)}', ''); RETURN NULL; END $$",
        f"DROP TRIGGER IF EXISTS {table}_notify ON {table}",
        f"CREATE TRIGGER {table}_notify AFTER INSERT ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {table}_notify()",
    ]


def _mysql(table: str) -> list[str]:
    # MySQL 8 has no CREATE INDEX IF NOT EXISTS: the indexes live in CREATE TABLE.
    return [
        _rows(table, "LONGBLOB", "DOUBLE", "LONGTEXT", "BIGINT")
        + f", UNIQUE KEY {table}_key_seq (aggregateid, seq), "
        f"KEY {table}_unkeyed (state, aggregateid, claimed_until), "
        f"KEY {table}_sent (state, sent_at)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
        _keys(table, "DOUBLE", "BIGINT")
        + f", KEY {keys_table(table)}_pending (pending, claimed_until), "
        f"KEY {keys_table(table)}_claim (claimed_by)) "
        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    ]


def _sqlite(table: str) -> list[str]:
    keys = keys_table(table)
    return [
        _rows(table, "BLOB", "REAL", "TEXT", "INTEGER") + ")",
        f"CREATE UNIQUE INDEX IF NOT EXISTS {table}_key_seq ON {table} (aggregateid, seq)",
        f"CREATE INDEX IF NOT EXISTS {table}_unkeyed ON {table} (state, aggregateid, "
        "claimed_until)",
        f"CREATE INDEX IF NOT EXISTS {table}_sent ON {table} (state, sent_at)",
        _keys(table, "REAL", "INTEGER") + ")",
        f"CREATE INDEX IF NOT EXISTS {keys}_pending ON {keys} (pending, claimed_until)",
        f"CREATE INDEX IF NOT EXISTS {keys}_claim ON {keys} (claimed_by)",
    ]
