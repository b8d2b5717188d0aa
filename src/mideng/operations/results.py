"""What the operator views answer: an operation's state, what reconcile did, a stale task.

The states and outcomes are enums whose members are also their names as strings, so
``item.state == "expired"`` holds, and they print and encode to JSON as ``expired``: the
words the CLI shows and cron scripts match.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from mideng.core.audit import AuditEntry
from mideng.core.record import Record


class _Word(str, enum.Enum):
    """A member that is its value wherever a string is: compared, hashed, printed, formatted."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)

    def __hash__(self) -> int:
        return str.__hash__(self)


class OperationState(_Word):
    """Where an operation stands, judged from its record by this process's clock."""

    #: A live holder is running it (its lease is being renewed).
    RUNNING = "running"
    #: Its holder stopped renewing (it died): reconcile runs it again.
    EXPIRED = "expired"
    #: A failed run let it go, or its record is gone or past its TTL: the next call or
    #: reconcile resumes it.
    RELEASED = "released"
    #: A task failure that may run again (attempts left under ``max_attempts``).
    RETRYING = "retrying"
    #: A recorded failure with no attempts left.
    FAILED = "failed"
    #: An UNKNOWN record (its holder died where the effect may have happened): resolve it first.
    UNKNOWN = "unknown"
    #: Its record completed; only its kept steps are left for reconcile to clear. ``pending``
    #: never lists it.
    DONE = "done"


class ReconcileOutcome(_Word):
    """What reconcile did with one operation."""

    #: Run again to its end; ``detail`` is its result (a string as it is, else JSON).
    FINISHED = "finished"
    #: Run again and failed, or a store error at it; ``detail`` is the error's type and
    #: message (``ProviderDown: sms gateway timed out``).
    FAILED = "failed"
    #: Left alone in its state (``detail``): running, unknown or failed.
    SKIPPED = "skipped"
    #: Begun less than ``min_age`` seconds ago: left to its caller's own retry (``detail``:
    #: its state and age).
    LEFT_TO_CALLER = "left_to_caller"
    #: No ``@guard.operation`` for its scope in this process: reported, never guessed.
    UNREGISTERED = "unregistered"
    #: Its record had completed; its kept steps were dropped.
    CLEARED = "cleared"
    #: A plan's answer (``reconcile(plan=True)``): it would be run again; nothing was run.
    WOULD_RUN = "would_run"
    #: A plan's answer: its kept steps would be dropped; nothing was.
    WOULD_CLEAR = "would_clear"


@dataclass(frozen=True)
class SeenOperation:
    """What an operator saw of an operation: its state and its record's fence (None: it had
    no record). ``reconcile_one`` acts only while the operation is still so."""

    state: OperationState
    fence: int | None

    def __str__(self) -> str:
        return f"{self.state.value} (fence {self.fence})"


@dataclass
class PendingOperation:
    """An unfinished operation: its state, the steps done (``name#n``) and left, attempts,
    since when, and whether this process has its function to run it again."""

    scope: str
    key: str
    state: OperationState
    steps_done: list[str]
    steps_left: list[str] | None  # None: the operation did not declare its steps
    attempts: int
    since: float  # when the operation first started (store clock)
    registered: bool
    record: Record | None = field(default=None, repr=False)

    @property
    def seen(self) -> SeenOperation:
        """What an operator looking at this sees: its state and fence."""
        return SeenOperation(self.state, None if self.record is None else self.record.fence)


@dataclass
class Reconciled:
    """What reconcile did with one operation, and the detail that goes with it."""

    scope: str
    key: str
    outcome: ReconcileOutcome
    detail: str = ""

    def audited(self, operator: str, seen: SeenOperation) -> AuditEntry:
        """The audit row of an operator's reconcile that did this, of the operation seen."""
        after = f"{self.outcome.value}: {self.detail}"
        return AuditEntry(operator, "reconcile", self.target, str(seen), after)

    @property
    def target(self) -> str:
        return f"operation {self.scope}:{self.key}"


@dataclass
class StaleTask:
    """A processing record nobody should leave alone: why, and since when (first claim)."""

    record: Record
    reason: str
    running_for: float
