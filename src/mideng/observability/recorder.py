"""What observed calls record into: one ``Series`` per metric and label values.

A call records by appending to its series' ``pending`` list, and nothing else: ``list.append``
is one step under the GIL, so threads and tasks record without a lock, a shard or a
thread-local lookup, and no event is lost or counted twice. Appended events are folded into
the series' totals (count, sum, buckets) when the collector reads them, or by the recording
call itself once ``FOLD_AT`` are waiting, so a process nobody scrapes holds a bounded list.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from typing import Any

#: Upper bounds (seconds) of the duration histograms' buckets.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Events a series keeps unfolded before the call that appends the next folds them.
FOLD_AT = 4096


def takes_over(req: Any, record: Any) -> bool:
    """Whether an acquired claim is over an attempt that never finished: its lease ran out
    (or an operator settled it as failed). A record reclaimed because its retention ran out
    counts no attempt as unfinished: it is at least ``ttl`` older than its first claim."""
    return record.attempts > 1 and (
        req.ttl is None or record.updated_at - record.created_at < req.ttl
    )


class Series:
    """One labelled series. A counter appends None per event; a timed series appends the
    event's duration in seconds (its count is also a counter's value, e.g. the claims by
    outcome are the claim durations by outcome)."""

    __slots__ = ("buckets", "count", "pending", "sum", "timed")

    def __init__(self, timed: bool) -> None:
        self.timed = timed
        self.pending: list[Any] = []
        self.count = 0
        self.sum = 0.0
        self.buckets = [0] * (len(BUCKETS) + 1) if timed else []  # the last one is +Inf

    def fold(self) -> None:
        """Move the pending events into the totals; the caller holds the recorder's lock.
        Appends racing with this land after the copied prefix, which alone is deleted."""
        pending = self.pending
        taken = pending[:]
        del pending[: len(taken)]
        self.count += len(taken)
        if self.timed and taken:
            # Sorted once (in C), each bucket's count is two bisections apart: no Python loop
            # over the events, which would cost each call more than recording it did.
            taken.sort()
            self.sum += sum(taken)
            below = 0
            buckets = self.buckets
            for i, bound in enumerate(BUCKETS):
                upto = bisect_right(taken, bound, below)
                buckets[i] += upto - below
                below = upto
            buckets[-1] += len(taken) - below


class Recorder:
    """Every series of one ``metrics.enable()``: ``series[name][labels]``.

    ``durations``: whether store calls and bodies are timed (the histograms) or only counted;
    untimed, a claim appends 0.0, so the claims' counter reads the same."""

    def __init__(self, names: tuple[str, ...], durations: bool = True) -> None:
        self.durations = durations
        self._lock = threading.Lock()
        self.series: dict[str, dict[tuple[str, ...], Series]] = {name: {} for name in names}
        # The claims by (scope, outcome), and per scope, for the store wrappers' lookups.
        self.claims = self.series["mideng_claims"]
        self.store_seconds = self.series["mideng_store_call_seconds"]
        self.body_seconds = self.series["mideng_body_seconds"]

    def get(self, name: str, labels: tuple[str, ...], timed: bool = False) -> Series:
        """The series, made on first use (``setdefault`` is one step: two threads making the
        same series at once both get the one kept)."""
        found = self.series[name].get(labels)
        if found is None:
            found = self.series[name].setdefault(labels, Series(timed and self.durations))
        return found

    def add(self, series: Series, value: Any) -> None:
        series.pending.append(value)
        if len(series.pending) >= FOLD_AT:
            self.fold()

    def count(self, name: str, labels: tuple[str, ...]) -> None:
        self.add(self.get(name, labels), None)

    def fold(self) -> None:
        with self._lock:
            for by_labels in self.series.values():
                for series in list(by_labels.values()):
                    series.fold()

    def snapshot(self) -> dict[str, dict[tuple[str, ...], Series]]:
        """Every series, folded: read them before the next call appends more."""
        self.fold()
        return {name: dict(by_labels) for name, by_labels in self.series.items()}

    # -- the events the log lines and integrations report (observers.Metrics) -------------------
    def store_error(self, store: str, operation: str) -> None:
        self.count("mideng_store_errors", (store, operation))

    def fenced(self, scope: str, operation: str) -> None:
        self.count("mideng_fenced_writes", (scope, operation))

    def takeover(self, scope: str) -> None:
        self.count("mideng_takeovers", (scope,))

    def fail_open(self, scope: str, step: str) -> None:
        self.count("mideng_fail_open_runs", (scope, step))

    def heartbeat_failed(self, scope: str) -> None:
        self.count("mideng_heartbeat_failures", (scope,))

    def consumed(self, scope: str, verdict: str) -> None:
        self.count("mideng_consumer_messages", (scope, verdict))

    def job_slot(self, job: str, outcome: str, seconds: float | None, took_over: bool) -> None:
        """One slot of a scheduled job, by outcome; a run's duration, and whether it took
        the slot over from a holder whose lease ran out."""
        self.count("mideng_job_slots", (job, outcome))
        if took_over:
            self.count("mideng_job_takeovers", (job,))
        if seconds is not None:
            self.add(self.get("mideng_job_seconds", (job,), timed=True), seconds)

    def http_reply(self, status: int, replayed: bool) -> None:
        self.count("mideng_http_responses", (f"{status // 100}xx", "true" if replayed else "false"))

    def transaction(self, scope: str, outcome: str) -> None:
        """A transactional block's claim, by outcome (its records are written on the caller's
        connection, not through a store's operations)."""
        self.count("mideng_transaction_claims", (scope, outcome))

    def transaction_error(self, scope: str) -> None:
        self.count("mideng_transaction_errors", (scope,))
