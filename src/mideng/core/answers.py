"""What an operator's conditional action answers (mideng.guard.operator, mideng.outbox.dead,
mideng.operations.reconcile's ``reconcile_one``).

An operator acts on what they saw: a record at a status and fence, a dead outbox row with its
attempts, an operation in its state. The action is done only while that is still so; when it
is not, nothing is done and the answer says what there is now. Neither case raises: the
caller (the CLI, Django's admin, a dashboard) shows the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """The action was done; ``now``: what it acted on, as it left it (a settled record, a
    record as it was when released, a requeued row)."""

    now: T


@dataclass(frozen=True, slots=True)
class Changed(Generic[T]):
    """Nothing was done: the thing changed meanwhile; ``now``: what it is now."""

    now: T


@dataclass(frozen=True, slots=True)
class Gone:
    """Nothing was done: the thing is no longer there."""


#: An action's answer about one thing of type T.
Answer = Done[T] | Changed[T] | Gone

__all__ = ["Answer", "Changed", "Done", "Gone"]
