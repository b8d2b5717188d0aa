"""The audit capability: where a store keeps its operators' actions, and the pages of them.

A store that settles or releases a record given a ``Resolution`` with an ``audit`` entry
writes the entry with the action: on a SQL table (PostgreSQL, MySQL/MariaDB, SQLite) in the
same transaction as the conditional write, into ``<table>_audit`` (``mideng.schema.audit``);
in the memory store under the same lock. Redis keeps the audit in a stream, ``<prefix>:audit``,
appended right after the action's script (a script touches one cluster slot, the record's;
the stream is in another), so there a crash between the two loses the row, never the action's
log line, which the caller writes after it. A hybrid store's audit is its durable store's.

``add_audit`` writes an entry on its own, for an action whose write is not one of the
store's statements (a reconcile runs the operation's function); ``audit_rows`` pages through
the audit newest first (``AuditQuery``): by ``id`` on SQL, by stream id on Redis.
"""

from __future__ import annotations

import abc

from mideng.core.audit import AuditEntry, AuditQuery, AuditRow
from mideng.core.record import Record, Resolution, Seen


def record_state(record: Record | None) -> str:
    """A record's state as an audit row (and an operator's page) says it."""
    if record is None:
        return "gone"
    return f"{record.status.value} (fence {record.fence}, attempts {record.attempts})"


#: What a released record is after the action.
RELEASED = "released (deleted)"


def seen_state(seen: Seen) -> str:
    """A record's state as an operator saw it (its status and fence)."""
    return f"{seen.status.value} (fence {seen.fence})"


def record_target(scope: str, key: str) -> str:
    return f"{scope}:{key}"


def audited(how: Resolution, done: Record) -> AuditEntry:
    """The audit row of the resolve ``how`` that made ``done`` (evicted: the record as it
    was)."""
    assert how.audit is not None
    return how.audit.made(RELEASED if how.evict else record_state(done))


class AuditStore(abc.ABC):
    """The audit capability, sync and async."""

    @abc.abstractmethod
    def add_audit(self, entry: AuditEntry) -> None:
        """Append ``entry`` to the audit."""

    @abc.abstractmethod
    async def aadd_audit(self, entry: AuditEntry) -> None: ...

    @abc.abstractmethod
    def audit_rows(self, query: AuditQuery) -> list[AuditRow]:
        """Up to ``query.limit`` rows written before ``query.before``, newest first."""

    @abc.abstractmethod
    async def aaudit_rows(self, query: AuditQuery) -> list[AuditRow]: ...
