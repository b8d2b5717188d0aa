"""The record table's schema as the SQL stores use it: its columns, and the start-up rule run on
a store's own connections.

The tables themselves, their migrations and their version are ``mideng.schema``'s (the DDL of
PostgreSQL, MySQL/MariaDB and SQLite in ``mideng.schema.records``). A store runs the start-up
rule once, when it first touches its tables: ``create_schema=True`` (the default) creates a
missing set, upgrades an older one where ``auto_upgrade`` is on, and refuses a newer one or an
older one it may not upgrade; ``create_schema=False`` only checks, at the first operation.
"""

from __future__ import annotations

from mideng.core.record import RECORD_FIELDS
from mideng.db.statements import Op
from mideng.schema.apply import Need, check, ensure
from mideng.schema.plan import fresh
from mideng.schema.records import REQUEST_ID_MAX
from mideng.schema.tables import DEFAULT_NAMES, FAMILIES, RECORDS, family_of, records

COLUMNS = RECORD_FIELDS
DEFAULT_TABLE = DEFAULT_NAMES[RECORDS]
KINDS = FAMILIES

__all__ = [
    "COLUMNS",
    "DEFAULT_TABLE",
    "KINDS",
    "REQUEST_ID_MAX",
    "checked",
    "ddl",
    "ensured",
    "script",
]


def ddl(kind: str, table: str) -> list[str]:
    """The statements that give a database without them the record table, its steps table and
    their version, at this mideng's version."""
    return fresh(records(table), kind).statements()


def script(kind: str, table: str) -> str:
    """``ddl`` as one text a person can read or pipe into psql / mysql / sqlite3."""
    return fresh(records(table), kind).script()


def ensured(kind: str, table: str, auto_upgrade: bool, command: str) -> Op[Need]:
    """The start-up rule on a connection that goes back to the pool: a fresh set is created
    there; an upgrade, which wants a connection without the store's timeouts, is answered
    UPGRADE for the store to run on one."""
    return ensure(
        family_of(kind),
        records(table),
        auto_upgrade=auto_upgrade,
        command=command,
        own_connection=False,
    )


def checked(kind: str, table: str, command: str) -> Op[None]:
    """The check of a store that does not create its tables: present, and at this version."""
    return check(family_of(kind), records(table), command=command)
