"""The outbox's tables, its rows table and its per-key table, in three spellings, as the changes
of each migration.

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
from mideng.schema.changes import Change, Create, Index, Trigger
from mideng.schema.tables import keys_table

#: The widest destination, key, type and request id kept (MySQL needs bounds on indexed text).
NAME_MAX = 255

PENDING, SENT, DEAD = 0, 1, 2


def channel(table: str) -> str:
    """The LISTEN/NOTIFY channel of a table (PostgreSQL)."""
    return check_table(table)


# -- version 1: the tables as mideng 0.1.0 made them -------------------------------------------
def tables(family: str, table: str) -> list[Change]:
    """Both tables, their indexes and (PostgreSQL) the trigger."""
    if family == "postgresql":
        return _postgresql(table)
    if family == "mysql":
        return _mysql(table)
    return _sqlite(table)


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


def _postgresql(table: str) -> list[Change]:
    pg, keys = "postgresql", keys_table(table)
    return [
        Create(_rows(table, "BYTEA", "DOUBLE PRECISION", "TEXT", "BIGINT") + ")", table),
        Index(pg, table, f"{table}_key_seq", "aggregateid, seq", unique=True),
        Index(
            pg,
            table,
            f"{table}_unkeyed",
            "claimed_until",
            f"aggregateid IS NULL AND state = {PENDING}",
        ),
        Index(pg, table, f"{table}_sent", "sent_at", f"state = {SENT}"),
        Create(_keys(table, "DOUBLE PRECISION", "BIGINT") + ")", keys),
        Index(pg, keys, f"{keys}_pending", "claimed_until", "pending = 1"),
        Index(pg, keys, f"{keys}_claim", "claimed_by"),
        Trigger(
            table,
            f"{table}_notify",
            (
                f"CREATE OR REPLACE FUNCTION {table}_notify() RETURNS trigger LANGUAGE plpgsql "
                f"AS $$ BEGIN PERFORM pg_notify('{channel(table)}', ''); RETURN NULL; END $$",
                f"DROP TRIGGER IF EXISTS {table}_notify ON {table}",
                f"CREATE TRIGGER {table}_notify AFTER INSERT ON {table} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {table}_notify()",
            ),
        ),
    ]


def _mysql(table: str) -> list[Change]:
    # MySQL 8 has no CREATE INDEX IF NOT EXISTS: the indexes live in CREATE TABLE.
    keys = keys_table(table)
    return [
        Create(
            _rows(table, "LONGBLOB", "DOUBLE", "LONGTEXT", "BIGINT")
            + f", UNIQUE KEY {table}_key_seq (aggregateid, seq), "
            f"KEY {table}_unkeyed (state, aggregateid, claimed_until), "
            f"KEY {table}_sent (state, sent_at)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            table,
        ),
        Create(
            _keys(table, "DOUBLE", "BIGINT") + f", KEY {keys}_pending (pending, claimed_until), "
            f"KEY {keys}_claim (claimed_by)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            keys,
        ),
    ]


def _sqlite(table: str) -> list[Change]:
    lite, keys = "sqlite", keys_table(table)
    return [
        Create(_rows(table, "BLOB", "REAL", "TEXT", "INTEGER") + ")", table),
        Index(lite, table, f"{table}_key_seq", "aggregateid, seq", unique=True),
        Index(lite, table, f"{table}_unkeyed", "state, aggregateid, claimed_until"),
        Index(lite, table, f"{table}_sent", "state, sent_at"),
        Create(_keys(table, "REAL", "INTEGER") + ")", keys),
        Index(lite, keys, f"{keys}_pending", "pending, claimed_until"),
        Index(lite, keys, f"{keys}_claim", "claimed_by"),
    ]
