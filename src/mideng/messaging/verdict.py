"""Verdicts: what the consumer tells an adapter to do with a message once it has decided,
and how it decides, without I/O, from the claim and the attempt count.

A finished duplicate is acked without running; one in flight elsewhere goes back to the broker
until the holder's lease would have run out (capped, so a crashed holder's message comes back
often enough to be taken over); a handler error goes back with exponential backoff until the
attempts run out, then it is dead-lettered, and so is every later copy of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mideng.core.failure import message_of
from mideng.core.policy import doubled
from mideng.core.record import FAILED, IN_PROGRESS, MISMATCH, REPLAY, Claim
from mideng.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class Ack:
    """Settled: run and committed now, or a duplicate of one that finished."""

    ran: bool


@dataclass(frozen=True, slots=True)
class Retry:
    """Give it back to the broker to be delivered again after ``delay`` seconds: in flight
    elsewhere, or a handler error with attempts left."""

    delay: float
    reason: str


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Never deliver it again: attempts exhausted, no key, or a malformed message."""

    reason: str


Verdict = Ack | Retry | DeadLetter

#: The shortest delay a message is handed back with: never a busy loop.
MIN_DELAY = 0.05


@dataclass(frozen=True, slots=True)
class RetryRules:
    """``max_attempts`` runs of the handler at most; the n-th failure waits
    ``retry_delay * 2**(n-1)`` seconds, at most ``max_retry_delay``; a message whose key is
    held elsewhere comes back after at most ``in_flight_delay`` seconds."""

    max_attempts: int = 5
    retry_delay: float = 1.0
    max_retry_delay: float = 60.0
    in_flight_delay: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be a positive int: {self.max_attempts!r}")
        for name in ("retry_delay", "max_retry_delay", "in_flight_delay"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ConfigurationError(f"{name} must be positive seconds: {value!r}")

    def backoff(self, attempt: int) -> float:
        """The delay after the ``attempt``-th failed run (1 for the first)."""
        return max(doubled(self.retry_delay, self.max_retry_delay, attempt), MIN_DELAY)

    def exhausted(self, attempt: int) -> bool:
        return attempt >= self.max_attempts


def standing(claim: Claim, now: float, rules: RetryRules) -> Verdict:
    """The verdict for a claim that was not acquired."""
    record = claim.record
    where = f"{record.scope}:{record.key}"
    if claim.outcome is REPLAY:
        if record.status is FAILED:
            return DeadLetter(f"{where} failed {record.attempts} time(s) and was given up on")
        return Ack(ran=False)
    if claim.outcome is IN_PROGRESS:
        left = (record.lease_until or now) - now
        return Retry(max(min(left, rules.in_flight_delay), MIN_DELAY), f"{where} is in flight")
    if claim.outcome is MISMATCH:
        return DeadLetter(f"{where} was used before for a different payload")
    # UNKNOWN: an operator must resolve it; until then the message waits, never lost.
    return Retry(rules.max_retry_delay, f"{where} is unresolved; resolve it to go on")


def after_failure(where: str, attempt: int, exc: BaseException, rules: RetryRules) -> Verdict:
    """The verdict after the handler's ``attempt``-th run raised ``exc``."""
    what = f"{type(exc).__name__}: {message_of(exc)}"  # a str() that raises: its type named
    if rules.exhausted(attempt):
        return DeadLetter(f"{where} failed {attempt} time(s); last error {what}")
    return Retry(rules.backoff(attempt), f"{where} attempt {attempt} failed: {what}")


def metric_label(verdict: Verdict) -> str:
    """The ``verdict`` label of mideng_consumer_messages_total: an Ack that did not run is a
    ``duplicate``."""
    if isinstance(verdict, Ack):
        return "ran" if verdict.ran else "duplicate"
    return "retry" if isinstance(verdict, Retry) else "dead_letter"
