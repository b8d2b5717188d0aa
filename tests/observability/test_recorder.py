"""The recorder's series: events folded into exact totals, a bounded pending list, and no
event lost to a fold racing with appends."""

from __future__ import annotations

import sys
import threading

from prometheus_client import CollectorRegistry

from mideng import Guard, open_store
from mideng.observability.recorder import BUCKETS, FOLD_AT, Recorder, Series
from tests.observability.scrape import series


def test_a_fold_puts_each_duration_in_its_bucket() -> None:
    one = Series(timed=True)
    values = [0.0005, 0.001, 0.0011, 0.003, 0.003, 0.7, 59.0, 60.0, 61.0, 1000.0]
    one.pending.extend(values)
    one.fold()
    assert one.pending == []
    assert one.count == len(values)
    assert one.sum == sum(sorted(values))
    expected = [0] * (len(BUCKETS) + 1)
    for v in values:  # a bound is inclusive: Prometheus' le
        expected[next((i for i, b in enumerate(BUCKETS) if v <= b), len(BUCKETS))] += 1
    assert one.buckets == expected
    assert one.buckets[0] == 2
    assert one.buckets[-1] == 2


def test_a_counter_folds_only_its_count() -> None:
    one = Series(timed=False)
    one.pending.extend([None] * 5)
    one.fold()
    assert (one.count, one.sum, one.buckets) == (5, 0.0, [])


def test_unscraped_calls_keep_a_bounded_list(registry: CollectorRegistry) -> None:
    guard = Guard(open_store("memory://"))
    guard.run("bounded", "k", lambda: 1)
    for _ in range(FOLD_AT + 100):
        guard.run("bounded", "k", lambda: 1)
    from mideng.observability import metrics

    rec = metrics.enabled()
    assert rec is not None
    (replays,) = [s for labels, s in rec.series["mideng_claims"].items() if labels[1] == "replay"]
    assert len(replays.pending) < FOLD_AT
    assert (
        series(registry, "mideng_claims_total")[(("outcome", "replay"), ("scope", "bounded"))]
        == FOLD_AT + 100
    )


def test_folds_racing_with_appends_lose_nothing() -> None:
    # Threads switched every microsecond: a fold that dropped what came in while it copied
    # would lose thousands here.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _race()
    finally:
        sys.setswitchinterval(interval)


def _race() -> None:
    rec = Recorder(("mideng_claims", "mideng_store_call_seconds", "mideng_body_seconds"))
    one = rec.get("mideng_claims", ("s", "replay"), timed=True)
    stop = threading.Event()

    def scraper() -> None:
        while not stop.is_set():
            rec.fold()

    def caller() -> None:
        for _ in range(20000):
            rec.add(one, 0.002)

    folding = threading.Thread(target=scraper)
    folding.start()
    callers = [threading.Thread(target=caller) for _ in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(60)
    stop.set()
    folding.join(60)
    rec.fold()
    assert one.count == 80000
    assert one.buckets[BUCKETS.index(0.0025)] == 80000
