"""An operator's action as the audit keeps it: who, when, what, the state before and after.

A dashboard (or another operator tool) hands an ``AuditEntry`` to the action it asks for; the
store, or the outbox, writes it as one ``AuditRow`` where the action's own conditional write
is, in the same transaction where that is SQL (``mideng.schema.audit``), so an action done is
an action audited. Rows are only added: nothing in mideng updates or deletes one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

#: The most audit rows one page asks for.
AUDIT_PAGE_MAX = 500


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """``operator`` did ``action`` to ``target``, which was ``before``; ``after`` is what it
    made (the store writing the entry fills it in from what the action made, when empty)."""

    operator: str
    action: str
    target: str
    before: str
    after: str = ""

    def made(self, after: str) -> AuditEntry:
        return replace(self, after=after)


@dataclass(frozen=True, slots=True)
class AuditRow:
    """An entry as kept: its place in the audit (``id``, ascending in the order written) and
    when (``at``, epoch seconds, the writing process's clock)."""

    id: str
    at: float
    operator: str
    action: str
    target: str
    before: str
    after: str


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """A page of the audit, newest first: the ``limit`` rows written before the row ``before``
    (None: the newest), of ``operator``, ``action`` and ``target`` when given (exact)."""

    operator: str | None = None
    action: str | None = None
    target: str | None = None
    before: str | None = None
    limit: int = 50

    def takes(self, row: AuditRow) -> bool:
        """Whether ``row`` matches the filters (where rows are filtered one by one)."""
        return (
            (self.operator is None or row.operator == self.operator)
            and (self.action is None or row.action == self.action)
            and (self.target is None or row.target == self.target)
        )


__all__ = ["AUDIT_PAGE_MAX", "AuditEntry", "AuditQuery", "AuditRow"]
