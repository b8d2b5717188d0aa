"""Prometheus metrics for every Guard in the process: ``metrics.enable()``.

``enable(registry=None)`` registers one collector on ``registry`` (prometheus-client's default
registry when None) and turns the Guard's observation on; ``disable()`` takes it away again.
Calls record into plain counters and bucket arrays under one lock per store call (the store's
operations are wrapped while metrics are on, see ``instrument``), and the collector turns them
into metric families at scrape time, so an observed call never goes through
prometheus-client's per-sample machinery. The series and their labels are listed in
docs/observability.md; their names and label names are stable.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from mideng.errors import ConfigurationError
from mideng.observability import instrument, watch

#: Upper bounds (seconds) of the duration histograms' buckets.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# name -> (help, label names); every counter mideng exports.
COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "mideng_claims": (
        "Claims answered by the store, by outcome (acquired, replay, in_progress, mismatch, "
        "unresolved); a caller that waits counts each poll.",
        ("scope", "outcome"),
    ),
    "mideng_takeovers": (
        "Claims acquired over an earlier attempt that never finished (its lease ran out).",
        ("scope",),
    ),
    "mideng_fenced_writes": (
        "Writes refused because their claim was no longer the live one (a zombie holder).",
        ("scope", "operation"),
    ),
    "mideng_heartbeat_failures": ("Lease renewals that failed.", ("scope",)),
    "mideng_store_errors": (
        "Store calls that failed with StoreUnavailableError.",
        ("store", "operation"),
    ),
    "mideng_fail_open_runs": (
        "Bodies run unguarded because the store was down and the policy is fail_open.",
        ("scope", "step"),
    ),
    "mideng_consumer_messages": (
        "Messages a consumer decided, by verdict: ran (handled and acked), duplicate (acked "
        "without running), retry (given back to the broker), dead_letter.",
        ("scope", "verdict"),
    ),
    "mideng_http_responses": (
        "Responses of the HTTP integrations, by status class and whether they were replays.",
        ("status_class", "replayed"),
    ),
}
HISTOGRAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "mideng_body_seconds": (
        "Time from a claim acquired to the call settling it: the body and encoding its result.",
        ("scope",),
    ),
    "mideng_store_call_seconds": (
        "Time of each store call a guarded call made, by operation.",
        ("scope", "operation"),
    ),
}


class _Histogram:
    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # the last one is +Inf
        self.sum = 0.0


class _Shard:
    """One thread's counts: written by that thread only, so no lock is taken per call (the
    collector copies each dict in one step, which the GIL makes atomic)."""

    def __init__(self) -> None:
        self.counters: dict[str, dict[tuple[str, ...], int]] = {name: {} for name in COUNTERS}
        self.histograms: dict[str, dict[tuple[str, ...], _Histogram]] = {
            name: {} for name in HISTOGRAMS
        }
        self.claims = self.counters["mideng_claims"]
        self.takeovers = self.counters["mideng_takeovers"]
        self.store_seconds = self.histograms["mideng_store_call_seconds"]
        self.body_seconds = self.histograms["mideng_body_seconds"]


def _observe(series: dict[tuple[str, ...], _Histogram], labels: tuple[str, ...], v: float) -> None:
    h = series.get(labels)
    if h is None:
        h = series[labels] = _Histogram()
    h.counts[bisect_left(BUCKETS, v)] += 1
    h.sum += v


class Recorder:
    """What observed calls record into, a shard per thread; summed by the collector at
    scrape time. A coroutine records between two awaits, so tasks sharing a thread never
    interleave inside one record."""

    def __init__(self, durations: bool = True) -> None:
        #: Whether store calls and bodies are timed (the histograms), or only counted.
        self.durations = durations
        self._lock = threading.Lock()
        self._local = threading.local()
        self._shards: list[_Shard] = []

    def _shard(self) -> _Shard:
        try:
            shard: _Shard = self._local.shard
        except AttributeError:
            shard = self._local.shard = _Shard()
            with self._lock:
                self._shards.append(shard)
        return shard

    def _count(self, name: str, labels: tuple[str, ...]) -> None:
        series = self._shard().counters[name]
        series[labels] = series.get(labels, 0) + 1

    # -- the events (watch.Metrics) ---------------------------------------------------------
    def counted(self, scope: str, outcome: str, takeover: bool) -> None:
        """A claim, without its duration (``durations=False``)."""
        shard = self._shard()
        claims = shard.claims
        labels = (scope, outcome)
        claims[labels] = claims.get(labels, 0) + 1
        if takeover:
            shard.takeovers[(scope,)] = shard.takeovers.get((scope,), 0) + 1

    def claimed(self, scope: str, outcome: str, seconds: float, takeover: bool) -> None:
        shard = self._shard()
        claims = shard.claims
        labels = (scope, outcome)
        claims[labels] = claims.get(labels, 0) + 1
        if takeover:
            shard.takeovers[(scope,)] = shard.takeovers.get((scope,), 0) + 1
        _observe(shard.store_seconds, (scope, "claim"), seconds)

    def stored(
        self, scope: str, operation: str, seconds: float, begun: float | None, started: float
    ) -> None:
        """A store call other than a claim; ``begun``: when the claim it settles was acquired
        (the body ran from then until ``started``)."""
        shard = self._shard()
        _observe(shard.store_seconds, (scope, operation), seconds)
        if begun is not None:
            _observe(shard.body_seconds, (scope,), started - begun)

    def body(self, scope: str, seconds: float) -> None:
        _observe(self._shard().body_seconds, (scope,), seconds)

    def store_error(self, store: str, operation: str) -> None:
        self._count("mideng_store_errors", (store, operation))

    def fenced(self, scope: str, operation: str) -> None:
        self._count("mideng_fenced_writes", (scope, operation))

    def fail_open(self, scope: str, step: str) -> None:
        self._count("mideng_fail_open_runs", (scope, step))

    def heartbeat_failed(self, scope: str) -> None:
        self._count("mideng_heartbeat_failures", (scope,))

    def consumed(self, scope: str, verdict: str) -> None:
        self._count("mideng_consumer_messages", (scope, verdict))

    def http_reply(self, status: int, replayed: bool) -> None:
        self._count(
            "mideng_http_responses", (f"{status // 100}xx", "true" if replayed else "false")
        )

    # -- reading ----------------------------------------------------------------------------
    def snapshot(self) -> tuple[dict[str, dict[tuple[str, ...], int]], dict[str, Any]]:
        """Every shard summed."""
        with self._lock:
            shards = list(self._shards)
        counters: dict[str, dict[tuple[str, ...], int]] = {name: {} for name in COUNTERS}
        histograms: dict[str, dict[tuple[str, ...], tuple[list[int], float]]] = {
            name: {} for name in HISTOGRAMS
        }
        for shard in shards:
            for name, series in shard.counters.items():
                total = counters[name]
                for labels, n in dict(series).items():
                    total[labels] = total.get(labels, 0) + n
            for name, hseries in shard.histograms.items():
                hist = histograms[name]
                for labels, h in dict(hseries).items():
                    counts, added = list(h.counts), h.sum
                    if labels in hist:
                        before, sum_before = hist[labels]
                        counts = [a + b for a, b in zip(before, counts, strict=True)]
                        added += sum_before
                    hist[labels] = (counts, added)
        return counters, histograms


def _prometheus() -> Any:
    try:
        import prometheus_client
        from prometheus_client import core
    except ImportError as exc:
        raise ConfigurationError(
            "mideng metrics need prometheus-client: pip install 'mideng[metrics]'"
        ) from exc
    return prometheus_client, core


class Collector:
    """A prometheus-client collector over a Recorder."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._core = _prometheus()[1]

    def describe(self) -> Iterator[Any]:
        yield from self._families({name: {} for name in COUNTERS}, {n: {} for n in HISTOGRAMS})

    def collect(self) -> Iterator[Any]:
        yield from self._families(*self.recorder.snapshot())

    def _families(
        self, counters: dict[str, dict[tuple[str, ...], int]], histograms: dict[str, Any]
    ) -> Iterator[Any]:
        core = self._core
        for name, (doc, labels) in COUNTERS.items():
            family = core.CounterMetricFamily(name, doc, labels=list(labels))
            for values, count in sorted(counters[name].items()):
                family.add_metric(list(values), count)
            yield family
        bounds = [*(repr(b) for b in BUCKETS), "+Inf"]
        for name, (doc, labels) in HISTOGRAMS.items():
            family = core.HistogramMetricFamily(name, doc, labels=list(labels))
            for values, (counts, total) in sorted(histograms[name].items()):
                cumulative, running = [], 0
                for bound, n in zip(bounds, counts, strict=True):
                    running += n
                    cumulative.append((bound, running))
                family.add_metric(list(values), cumulative, total)
            yield family


_state: dict[str, Any] = {}
_lock = threading.Lock()


def enable(registry: Any = None, *, durations: bool = True) -> Recorder:
    """Turn metrics on for every Guard in the process, exported through ``registry``
    (prometheus-client's default ``REGISTRY`` when None). Enabling again with another
    registry (or ``durations``) moves the metrics there, starting from zero.

    ``durations=False`` keeps the counters and drops the two histograms: no clock is read,
    which is most of what metrics cost a call (docs/benchmarks.md)."""
    prometheus_client = _prometheus()[0]
    target = prometheus_client.REGISTRY if registry is None else registry
    with _lock:
        if _state.get("registry") is target and _state["recorder"].durations == durations:
            recorder: Recorder = _state["recorder"]
            return recorder
        _unregister()
        recorder = Recorder(durations)
        collector = Collector(recorder)
        target.register(collector)
        _state.update(registry=target, recorder=recorder, collector=collector)
        watch.install(metrics=recorder)
        instrument.instrument(recorder)
        return recorder


def disable() -> None:
    """Turn metrics off: the Guard's hook goes back to its one test, the collector away."""
    with _lock:
        _unregister()
        instrument.restore()
        watch.install(metrics=None)


def _unregister() -> None:
    if "collector" in _state:
        _state["registry"].unregister(_state["collector"])
        _state.clear()


def enabled() -> Recorder | None:
    """The recorder of the enabled metrics, or None."""
    recorder: Recorder | None = _state.get("recorder")
    return recorder
