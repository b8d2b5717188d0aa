"""What the operator commands report of operations, written once for every command that
reports them: ``mideng operations pending / reconcile / stale`` and the Django app's
``mideng_reconcile``. One JSON document a command, of stable field names (docs/operations.md),
the same shape when nothing is found (``{"count": 0, ...}``), every value typed: times as ISO
8601 or null, lists as lists, never a placeholder or a Python repr."""

from __future__ import annotations

from typing import Any

from mideng.operations.reconcile import needs_attention
from mideng.operations.results import PendingOperation, Reconciled, StaleTask
from mideng.stores.reports import when


def pending(found: list[PendingOperation]) -> dict[str, Any]:
    """``operations pending``: each unfinished operation, its steps done and left (null: it
    declared none), since when, and whether this process can run it again."""
    return {
        "count": len(found),
        "operations": [
            {
                "scope": p.scope,
                "key": p.key,
                "state": p.state.value,
                "steps_done": list(p.steps_done),
                "steps_left": None if p.steps_left is None else list(p.steps_left),
                "attempts": p.attempts,
                "since": when(p.since),
                "registered": p.registered,
            }
            for p in found
        ],
    }


def reconciled(report: list[Reconciled], plan: bool) -> dict[str, Any]:
    """``operations reconcile``: what it did (or, with ``plan``, would do) with each
    operation, and whether one needs an operator (the command's exit 1)."""
    return {
        "count": len(report),
        "plan": plan,
        "needs_attention": needs_attention(report),
        "operations": [
            {"scope": r.scope, "key": r.key, "outcome": r.outcome.value, "detail": r.detail}
            for r in report
        ],
    }


def stale(found: list[StaleTask]) -> dict[str, Any]:
    """``operations stale``: each processing record nobody should leave alone, and why."""
    return {
        "count": len(found),
        "tasks": [
            {
                "scope": s.record.scope,
                "key": s.record.key,
                "attempts": s.record.attempts,
                "since": when(s.record.created_at),
                "running_for_seconds": round(s.running_for, 3),
                "reason": s.reason,
            }
            for s in found
        ],
    }


__all__ = ["pending", "reconciled", "stale"]
