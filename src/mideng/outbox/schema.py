"""The outbox's tables as the writer and the relay use them: names, states, and its DDL.

The tables themselves, their migrations and their version are ``mideng.schema``'s (the DDL of
PostgreSQL, MySQL/MariaDB and SQLite in ``mideng.schema.outbox``).
"""

from __future__ import annotations

from mideng.schema.outbox import DEAD, NAME_MAX, PENDING, SENT, channel
from mideng.schema.plan import fresh
from mideng.schema.tables import DEFAULT_NAMES, OUTBOX, keys_table, outbox

DEFAULT_TABLE = DEFAULT_NAMES[OUTBOX]

__all__ = [
    "DEAD",
    "DEFAULT_TABLE",
    "NAME_MAX",
    "PENDING",
    "SENT",
    "channel",
    "ddl",
    "keys_table",
    "script",
]


def ddl(kind: str, table: str) -> list[str]:
    """The statements that give a database without them both tables, their indexes, (on
    PostgreSQL) the trigger, and their version, at this mideng's version."""
    return fresh(outbox(table), kind).statements()


def script(kind: str, table: str) -> str:
    """``ddl`` as one text a person can read or pipe into psql / mysql / sqlite3."""
    return fresh(outbox(table), kind).script()
