"""One guarded call as an I/O-free state machine.

The drivers (``Guard.run`` and ``Guard.arun``) loop: ask the store for a claim, hand it to
``Call.next`` and do what it says: run the body, return a replayed value, raise, or wait and
ask again. Everything that decides lives here, once, for both drivers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mideng.core.failure import rebuild_failure
from mideng.core.policy import OnInProgress, Policy
from mideng.core.record import (
    ACQUIRED,
    FAILED,
    MISMATCH,
    REPLAY,
    UNRESOLVED,
    Claim,
    ClaimRequest,
    Record,
    Ticket,
)
from mideng.errors import (
    AttemptsExhaustedError,
    IdempotencyError,
    InProgressError,
    PayloadMismatchError,
    UnresolvedError,
)

# Polling while another holder works: start fast (most bodies are short), back off to a cap.
FIRST_POLL = 0.005
MAX_POLL = 0.25


@dataclass(slots=True)
class Run:
    ticket: Ticket


@dataclass(slots=True)
class Return:
    value: Any
    record: Record


@dataclass(slots=True)
class Raise:
    error: BaseException


@dataclass(slots=True)
class Wait:
    delay: float


Action = Run | Return | Raise | Wait


def exhausted(scope: str, key: str, record: Record) -> AttemptsExhaustedError:
    last = rebuild_failure(record.error) if record.error is not None else None
    return AttemptsExhaustedError(
        f"{scope}:{key} failed {record.attempts} times (the last: {last!r}); it runs again "
        "only after an operator forgets (releases) or resolves it",
        record,
        last,
    )


@dataclass(slots=True)
class Call(ClaimRequest):
    """One guarded call. It is its own claim request (lease, ttl and expiry policy taken from
    its policy when it is made), so claiming again after a wait copies nothing."""

    policy: Policy = field(default_factory=Policy)
    started: float = 0.0  # the caller's monotonic clock when the call began
    type_hint: Any = None
    polls: int = 0
    duplicate: Claim | None = field(default=None, repr=False)

    def request(self) -> ClaimRequest:
        return self

    def next(self, claim: Claim, now: float) -> Action:
        """Decide what to do with a claim; ``now`` is the caller's monotonic clock."""
        if claim.outcome is ACQUIRED:
            return Run(Ticket.of(claim.record))
        if self.duplicate is None:
            self.duplicate = claim  # the driver logs the first sighting once
        record = claim.record
        if claim.outcome is REPLAY:
            if record.status is FAILED and record.error is not None:
                if self.policy.retry_limit:  # a kept failure replays only once attempts ran out
                    return Raise(exhausted(self.scope, self.key, record))
                return Raise(rebuild_failure(record.error))
            if record.result is None or record.codec is None:
                return Raise(IdempotencyError(f"{self.scope}:{self.key} has no stored result"))
            codec = self.policy.codec
            if record.codec != codec.name:
                from mideng.core.codec import get_codec

                codec = get_codec(record.codec)
            return Return(codec.decode(record.result, self.type_hint), record)
        if claim.outcome is MISMATCH:
            return Raise(
                PayloadMismatchError(
                    f"{self.scope}:{self.key} was used before with a different payload; use a new "
                    "key for a new operation",
                    record,
                )
            )
        if claim.outcome is UNRESOLVED:
            return Raise(
                UnresolvedError(
                    f"{self.scope}:{self.key} is UNKNOWN: an earlier attempt died while doing "
                    "irreversible work. Check with the provider, then Guard.resolve() it",
                    record,
                )
            )
        return self._in_progress(record, now)

    def _in_progress(self, record: Record, now: float) -> Action:
        remaining = self.policy.wait_timeout - (now - self.started)
        if self.policy.in_progress is OnInProgress.WAIT and remaining > 0:
            delay = min(FIRST_POLL * (2 ** min(self.polls, 16)), MAX_POLL, remaining)
            self.polls += 1
            return Wait(delay)
        waited = " after waiting" if self.policy.in_progress is OnInProgress.WAIT else ""
        return Raise(
            InProgressError(
                f"{self.scope}:{self.key} is still being processed by another caller{waited}",
                record,
                retry_after=min(self.policy.lease, 1.0),
            )
        )
