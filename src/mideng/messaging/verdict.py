"""What the consumer tells an adapter to do with a message once it has decided."""

from __future__ import annotations

from dataclasses import dataclass


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
