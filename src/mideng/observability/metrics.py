"""Prometheus metrics for every Guard in the process: ``metrics.enable()``.

``enable(registry=None)`` registers one collector on ``registry`` (prometheus-client's default
registry when None) and turns the Guard's observation on; ``disable()`` takes it away again.
Calls append their events to plain lists without a lock (``recorder``; the callers of a
store's record operations see it counted while metrics are on, see ``store_metrics``), and the
collector folds them into metric families at scrape time, so an observed call never goes
through prometheus-client's per-sample machinery. The series and their labels are listed in
docs/observability.md; their names and label names are stable.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from mideng.errors import ConfigurationError
from mideng.observability import observers
from mideng.observability.record_gauges import RecordGauges
from mideng.observability.recorder import BUCKETS, Recorder, Series

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
    "mideng_job_slots": (
        "Slots of scheduled jobs, by outcome: ran, failed (the job raised), done (run "
        "before), running (elsewhere), unknown (a holder with external effects died), "
        "skipped (by the missed or overlap policy).",
        ("job", "outcome"),
    ),
    "mideng_job_takeovers": (
        "Slots a scheduler ran after taking them over from a holder whose lease ran out.",
        ("job",),
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
    "mideng_job_seconds": ("Time a scheduled job's run took, claim to settled.", ("job",)),
}


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
        yield from self._families({name: {} for name in (*COUNTERS, *HISTOGRAMS)})

    def collect(self) -> Iterator[Any]:
        yield from self._families(self.recorder.snapshot())

    def _families(self, series: dict[str, dict[tuple[str, ...], Series]]) -> Iterator[Any]:
        core = self._core
        for name, (doc, labels) in COUNTERS.items():
            family = core.CounterMetricFamily(name, doc, labels=list(labels))
            for values, one in sorted(series[name].items()):
                family.add_metric(list(values), one.count)
            yield family
        # A claim's duration is kept with its outcome (its count is the claims counter);
        # the histogram is by operation, so a scope's outcomes are summed into "claim".
        timed = dict(series["mideng_store_call_seconds"])
        for (scope, _outcome), one in series["mideng_claims"].items():
            if one.timed:
                timed[(scope, "claim")] = _merged(timed.get((scope, "claim")), one)
        by_name = {
            "mideng_body_seconds": series["mideng_body_seconds"],
            "mideng_job_seconds": series["mideng_job_seconds"],
        }
        by_name["mideng_store_call_seconds"] = timed
        bounds = [*(repr(b) for b in BUCKETS), "+Inf"]
        for name, (doc, labels) in HISTOGRAMS.items():
            family = core.HistogramMetricFamily(name, doc, labels=list(labels))
            for values, one in sorted(by_name[name].items()):
                if not one.timed:
                    continue
                cumulative, running = [], 0
                for bound, n in zip(bounds, one.buckets, strict=True):
                    running += n
                    cumulative.append((bound, running))
                family.add_metric(list(values), cumulative, one.sum)
            yield family


def _merged(into: Series | None, one: Series) -> Series:
    total = Series(timed=True)
    for part in (into, one):
        if part is not None:
            total.count += part.count
            total.sum += part.sum
            total.buckets = [a + b for a, b in zip(total.buckets, part.buckets, strict=True)]
    return total


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
        recorder = Recorder((*COUNTERS, *HISTOGRAMS), durations)
        collector = Collector(recorder)
        target.register(collector)
        _state.update(registry=target, recorder=recorder, collector=collector)
        observers.install(metrics=recorder)
        return recorder


def watch_store(
    store: Any,
    registry: Any = None,
    *,
    interval: float = 60.0,
    grace: float = 60.0,
    prefix: str | None = None,
    name: str | None = None,
) -> RecordGauges:
    """Export gauges of what ``store`` holds (records by scope and status, stuck records, the
    oldest processing age; mideng.observability.record_gauges) through ``registry``
    (prometheus-client's default when None), from a survey taken at most once per
    ``interval`` seconds however often it is scraped. ``grace``: how long past its lease a
    processing record is stuck; ``prefix``: only scopes starting with it; ``name``: the
    ``store`` label (the URL's scheme by default). Independent of ``enable()``. Watch a store
    from one process (a replica, or a sidecar running ``mideng``'s Python): each process
    watching it surveys it."""
    prometheus_client, core = _prometheus()
    gauges = RecordGauges(store, core, interval=interval, grace=grace, prefix=prefix, name=name)
    target = prometheus_client.REGISTRY if registry is None else registry
    target.register(gauges)
    gauges.registry = target
    return gauges


def disable() -> None:
    """Turn metrics off: the Guard's hook goes back to its one test, the collector away."""
    with _lock:
        _unregister()
        observers.install(metrics=None)


def _unregister() -> None:
    if "collector" in _state:
        _state["registry"].unregister(_state["collector"])
        _state.clear()


def enabled() -> Recorder | None:
    """The recorder of the enabled metrics, or None."""
    recorder: Recorder | None = _state.get("recorder")
    return recorder
