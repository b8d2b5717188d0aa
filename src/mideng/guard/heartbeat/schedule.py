"""When a lease is renewed next: the schedule both heartbeat sides follow, and their counters.

A renewal's outcome goes in (``Lease.settle``), the next due time comes out. ``LeaseLostError``
(fenced: the record was forgotten, taken over or settled) ends the beat; anything else is
transient and retried sooner and sooner as the lease's end nears, then on past it: while nobody
has taken over, the record is unchanged and a renewal restores it. The sync side
(``mideng.guard.heartbeat.threads``) and the async side (``mideng.guard.heartbeat.tasks``) only
do the I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from mideng.errors import LeaseLostError
from mideng.observability import logs

# Retry pacing after a failure, in periods: at most one period apart, at least 1/20.
_RETRY_FLOOR = 1 / 20
_AFTER_LAPSE = 1 / 2


class Stats:
    """Process-wide heartbeat counters (renewals, failures, lost, lapsed, recovered,
    restarts): failures are rare, so a lock per count costs nothing that matters."""

    __slots__ = ("_counts", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(
            ("renewals", "failures", "lost", "lapsed", "recovered", "restarts"), 0
        )

    def add(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


STATS = Stats()


def stats() -> dict[str, int]:
    """A copy of the heartbeat counters of this process."""
    return STATS.snapshot()


class Lease:
    """When one beat renews next, from what its renewals did; the same for both sides.

    Times are the side's own monotonic clock. ``deadline`` is the lease's end as this process
    can know it: a renewal sent at ``sent`` was stamped by the store no earlier, so its lease
    ends no earlier than ``sent + lease``.
    """

    __slots__ = (
        "cancelled",
        "deadline",
        "due",
        "failures",
        "ident",
        "lapsed",
        "lease",
        "period",
        "renew",
        "what",
    )

    def __init__(self, lease: float, renew: Callable[[], Any], what: object, now: float) -> None:
        self.lease = lease
        self.period = lease / 3
        self.renew = renew
        self.what = what  # names the claim in log lines
        self.deadline = now + lease
        self.due = now + self.period
        self.failures = 0
        self.lapsed = False
        self.cancelled = False
        self.ident = 0

    def settle(self, sent: float, now: float, exc: Exception | None) -> bool:
        """Take one renewal's outcome; False when the beat is over (its lease is lost)."""
        if exc is None:
            self.deadline = sent + self.lease
            self.due = sent + self.period
            if self.failures:
                logs.heartbeat_recovered(self.what, self.failures, self.lapsed)
                STATS.add("recovered")
                self.failures, self.lapsed = 0, False
            STATS.add("renewals")
            return True
        if isinstance(exc, LeaseLostError):
            self.cancelled = True
            logs.heartbeat_lost(self.what, exc)
            STATS.add("lost")
            return False
        self.failures += 1
        STATS.add("failures")
        remaining = self.deadline - now
        if remaining > 0:
            # Geometric towards the end: a third of what is left, never below a floor.
            delay = min(self.period, max(remaining / 3, self.period * _RETRY_FLOOR))
        else:
            delay = self.period * _AFTER_LAPSE
            if not self.lapsed:
                self.lapsed = True
                STATS.add("lapsed")
                logs.heartbeat_lapsed(self.what, exc, self.failures)
        self.due = now + delay
        logs.heartbeat_failed(self.what, exc, self.failures, remaining, delay)
        return True
