"""Gauges of what a store holds, for alerts on stuck records: ``metrics.watch_store(store)``.

A collector that answers a scrape from the store's survey (mideng.stores.survey: SQL
aggregates, a SCAN of every Redis master), taken at most once per ``interval``: scrapes in
between, and a scrape arriving while another one surveys, are answered from the last survey,
so however many scrapers there are the store sees one survey per interval from this process.
A survey that fails is counted and logged, and the scrape answers with the last good one; its
age (``mideng_survey_timestamp_seconds``) is what an alert on staleness reads.

Series (names and labels stable, docs/observability.md): ``mideng_records{store, scope,
status}``, ``mideng_stuck_records{store}`` (processing, lease ran out over ``grace`` s ago,
not taken over), ``mideng_oldest_processing_age_seconds{store}`` (absent when nothing is
processing), ``mideng_survey_timestamp_seconds{store}`` (when the last good survey ended),
``mideng_survey_duration_seconds{store}`` and ``mideng_survey_errors_total{store}``,
``mideng_records_estimated{store}`` (1 when the succeeded counts are estimates: a big SQL
table's, ``stores.survey.SurveyTerms``; then a store that cannot split them by scope gives them
with scope ``*``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from mideng.observability import logs
from mideng.observability.observers import store_label

#: The gauges of the store as a whole (label ``store``) and their help, in the order exposed.
_STORE_GAUGES = {
    "mideng_stuck_records": "Processing records whose lease ran out longer ago than the grace, "
    "not taken over.",
    "mideng_oldest_processing_age_seconds": "Age of the oldest processing record (absent when "
    "none is processing).",
    "mideng_survey_timestamp_seconds": "When the last good survey of the store ended (Unix time).",
    "mideng_survey_duration_seconds": "How long the last good survey took.",
    "mideng_records_estimated": "1 when mideng_records of status succeeded are estimates (a "
    "big SQL table: sampled or from its statistics), 0 when every count is exact.",
}
#: The scope label of an estimate the store could not split by scope.
UNSCOPED = "*"


class RecordGauges:
    """The collector of one watched store; ``close()`` takes it off its registry."""

    def __init__(
        self,
        store: Any,
        core: Any,
        *,
        interval: float,
        grace: float,
        prefix: str | None,
        name: str | None,
    ) -> None:
        if not callable(getattr(store, "survey", None)):
            raise TypeError(f"{type(store).__name__} can't be surveyed (no survey capability)")
        self.store = store
        self.interval = interval
        self.grace = grace
        self.prefix = prefix
        self.name = name or store_label(store)
        self._core = core
        self._lock = threading.Lock()
        self._survey: Any = None
        self._taken_at: float | None = None  # monotonic, when the last survey was attempted
        self._ended_at: float | None = None  # epoch, when the last good survey ended
        self._seconds: float | None = None
        self.errors = 0
        self.registry: Any = None

    def refresh(self) -> None:
        """Survey now, unless the last attempt is younger than ``interval`` or another
        caller is surveying (then the last survey stands)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            now = time.monotonic()
            if self._taken_at is not None and now - self._taken_at < self.interval:
                return
            self._taken_at = now
            try:
                found = self.store.survey(self.prefix, grace=self.grace, biggest=0, spread=False)
            except Exception as exc:  # the scrape goes on with the last good survey
                self.errors += 1
                logs.survey_failed(self.name, exc)
                return
            self._seconds = time.monotonic() - now
            self._ended_at = time.time()
            self._survey = found
        finally:
            self._lock.release()

    def describe(self) -> Iterator[Any]:
        return iter(self._families(None))

    def collect(self) -> Iterator[Any]:
        self.refresh()
        return iter(self._families(self._survey))

    def _families(self, found: Any) -> list[Any]:
        core, store = self._core, [self.name]
        records = core.GaugeMetricFamily(
            "mideng_records",
            "Records the store holds, by scope and status (at the last survey).",
            labels=["store", "scope", "status"],
        )
        gauges = {
            name: core.GaugeMetricFamily(name, text, labels=["store"])
            for name, text in _STORE_GAUGES.items()
        }
        errors = core.CounterMetricFamily(
            "mideng_survey_errors", "Surveys of the store that failed.", labels=["store"]
        )
        if found is not None:
            for scope, statuses in sorted(found.by_scope.items()):
                for status, n in sorted(statuses.items()):
                    records.add_metric([self.name, scope, status], n)
            for status, n in sorted(found.unscoped.items()):  # estimates not split by scope
                records.add_metric([self.name, UNSCOPED, status], n)
            values = {
                "mideng_stuck_records": found.stuck_count,
                "mideng_oldest_processing_age_seconds": found.oldest_processing_age,
                "mideng_survey_timestamp_seconds": self._ended_at,
                "mideng_survey_duration_seconds": self._seconds,
                "mideng_records_estimated": 1 if found.estimated else 0,
            }
            for name, value in values.items():
                if value is not None:  # no processing record, no oldest age
                    gauges[name].add_metric(store, value)
        errors.add_metric(store, self.errors)
        return [records, *gauges.values(), errors]

    def close(self) -> None:
        if self.registry is not None:
            self.registry.unregister(self)
            self.registry = None
