"""The audit tables and the operator lookups' indexes, as the changes of one migration.

An operator's action (a dashboard's resolve, release, requeue, reconcile) adds one row to the
audit table beside the tables it acted on: ``<records>_audit`` beside a record table,
``<outbox>_audit`` beside an outbox, so the row is written in the same database, and in the
same transaction, as the conditional update it records. Rows are only ever inserted: mideng
has no statement that updates or deletes one. ``id`` orders them (the audit page pages by it,
newest first); ``at`` is the database's clock, epoch seconds as every time mideng stores.

The same migration indexes the lookup by request id (records and outbox rows) and, on
SQLite, the processing records by lease: the servers have had ``<table>_open (status,
lease_until)`` since version 1, SQLite's table had no secondary index at all. Each index is
partial where the database has partial indexes, so a row without a request id, or a record
that is not processing, costs no entry.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from mideng.core.audit import AuditEntry, AuditQuery, AuditRow
from mideng.db.statements import Op, Sql, Stmt
from mideng.schema.changes import Change, Create, Index
from mideng.schema.tables import audit_table

#: The longest operator name and action name kept (MySQL needs bounds).
NAME_MAX = 255

#: The audit table's columns, in order (the statements that read and write it name them).
COLUMNS = ("id", "at", "operator", "action", "target", "state_before", "state_after")


def ddl(family: str, main: str) -> str:
    """The audit table beside ``main`` (a record table or an outbox)."""
    a = audit_table(main)
    if family == "postgresql":
        return (
            f"CREATE TABLE IF NOT EXISTS {a} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
            "at double precision NOT NULL, operator text NOT NULL, action text NOT NULL, "
            "target text NOT NULL, state_before text NOT NULL, state_after text NOT NULL)"
        )
    if family == "mysql":
        return (
            f"CREATE TABLE IF NOT EXISTS {a} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
            f"at DOUBLE NOT NULL, operator VARCHAR({NAME_MAX}) NOT NULL, "
            f"action VARCHAR({NAME_MAX}) NOT NULL, target TEXT NOT NULL, "
            "state_before TEXT NOT NULL, state_after TEXT NOT NULL) ENGINE=InnoDB "
            "DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        )
    # AUTOINCREMENT: an id is never handed out twice, not even after the newest row is gone.
    return (
        f"CREATE TABLE IF NOT EXISTS {a} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "at REAL NOT NULL, operator TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL, "
        "state_before TEXT NOT NULL, state_after TEXT NOT NULL)"
    )


def _by_request(family: str, table: str) -> Index:
    name = f"{table}_request"
    if family == "mysql":
        return Index(family, table, name, "request_id")
    return Index(family, table, name, "request_id", "request_id IS NOT NULL")


def records_audit(family: str, t: str) -> list[Change]:
    """A record table's audit table and its request-id index. (SQLite's processing records
    by lease are read through version 3's ``_unresolved``: a second partial index of them
    would cost every first call another entry written and removed.)"""
    return [Create(ddl(family, t), audit_table(t)), _by_request(family, t)]


def outbox_audit(family: str, t: str) -> list[Change]:
    """An outbox's audit table and its rows' request-id index."""
    return [Create(ddl(family, t), audit_table(t)), _by_request(family, t)]


# -- the statements that write and read it ------------------------------------------------
# One insert; pages read newest first by ``id`` (the primary key, walked backwards from the
# page's position; a filter is checked on the rows it walks, so a filter that matches few rows
# of a long audit reads more of it). Written once for the record stores and the outbox.
_FILTERS = ("operator", "action", "target")


class AuditStatements:
    """The statements of the audit table beside ``main`` (a record table or an outbox)."""

    def __init__(self, main: str) -> None:
        self.table = t = audit_table(main)
        self.add = Sql(
            f"INSERT INTO {t} (at, operator, action, target, state_before, state_after) "
            "VALUES (:at, :operator, :action, :target, :state_before, :state_after)"
        )
        self._select = (
            f"SELECT id, at, operator, action, target, state_before, state_after FROM {t}"
        )

    def page(self, query: AuditQuery) -> tuple[Sql, dict[str, Any]]:
        """The statement of one page, and its binds."""
        terms, params = [], {"limit": int(query.limit)}
        for name in _FILTERS:
            value = getattr(query, name)
            if value is not None:
                terms.append(f"{name} = :{name}")
                params[name] = value
        if query.before is not None:
            terms.append("id < :before")
            params["before"] = int(query.before)
        where = f" WHERE {' AND '.join(terms)}" if terms else ""
        return Sql(f"{self._select}{where} ORDER BY id DESC LIMIT :limit"), params


def entry_params(entry: AuditEntry) -> dict[str, Any]:
    return {
        "at": time.time(),
        "operator": entry.operator,
        "action": entry.action,
        "target": entry.target,
        "state_before": entry.before,
        "state_after": entry.after,
    }


def added(a: AuditStatements, entry: AuditEntry) -> Op[None]:
    """One row (inside whatever transaction the caller has begun)."""
    yield Stmt(a.add, entry_params(entry))


def listed(a: AuditStatements, query: AuditQuery) -> Op[list[AuditRow]]:
    if query.before is not None and not str(query.before).isdigit():
        return []  # no row of this table is before a position it did not write
    statement, params = a.page(query)
    res = yield Stmt(statement, params)
    return [audit_row(values) for values in res.rows]


def audit_row(values: Sequence[Any]) -> AuditRow:
    return AuditRow(
        str(values[0]),
        float(values[1]),
        *(_text(v) for v in values[2:7]),
    )


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)
