"""What a business-table primitive answers: one small type per outcome.

Success and refusal are both answers, not exceptions: a duplicate transition or insert is the
normal shape of a retry, and an illegal transition or an empty stock is a business decision
the caller makes (alert, refund, tell the user). ``ok`` says which side an answer is on, so
``if not result.ok:`` is the one check a caller needs before looking at the details.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class Applied:
    """The statement changed the row. ``version``: the row's new version, when one was kept."""

    version: int | None = None
    ok: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class AlreadyThere:
    """The row was already in the target state: a duplicate of a transition that happened."""

    ok: ClassVar[bool] = True


class Direction(enum.Enum):
    """Where an illegal transition's target lies from the row's current state, by the
    declared transitions: what an event that asked for it is, when events can come twice or
    out of order."""

    #: The row has been in the target or past it (its state is reachable from the target): a
    #: late or repeated event, already done with.
    BEHIND = "behind"
    #: The row may still get there, not in one step (the target is reachable from its state):
    #: an early event, which may apply once the steps before it have.
    AHEAD = "ahead"
    #: Neither: the row went another way (CANCELLED, the target SHIPPED), or its state is none
    #: of the machine's. It never gets there from here.
    ASIDE = "aside"
    #: Behind and ahead at once: a cycle runs through both, so the state alone does not tell a
    #: late event from an early one (a version or the event's own sequence has to).
    BOTH = "both"


@dataclass(frozen=True, slots=True)
class Illegal:
    """The row is in ``current``, from which the declared machine does not lead to the target;
    ``direction`` says where the target lies from there."""

    current: Any
    direction: Direction
    ok: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class Missing:
    """No row matched ``where``."""

    ok: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class Insufficient:
    """The column holds ``current``, less than the amount asked for; nothing was taken."""

    current: Any
    ok: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class Conflict:
    """The row's version is ``current_version``, not the one the caller read: someone else
    changed it since, and nothing was written."""

    current_version: int
    ok: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class Superseded:
    """The row was written under ``current_fence``, a newer claim's than the caller's: the
    caller's claim was taken over (a paused or partitioned holder, writing late), and nothing
    was written."""

    current_fence: int
    ok: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class Inserted:
    """The row was inserted; ``row`` maps each column to its stored value."""

    row: Mapping[str, Any]
    ok: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Existing:
    """A row with the same unique key was already there; ``row`` is that row, as stored."""

    row: Mapping[str, Any]
    ok: ClassVar[bool] = True
