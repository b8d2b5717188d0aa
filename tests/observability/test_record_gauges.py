"""The record gauges (metrics.watch_store): exact values from a real store's survey, one
survey per interval however often it is scraped, and a failing survey that breaks no scrape."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mideng import Guard, open_store
from mideng.core.record import ClaimRequest
from mideng.observability import metrics
from tests.backends_redis import delete_prefix
from tests.observability.scrape import series
from tests.services import MYSQL_URL, POSTGRES_URL, REDIS_URL, need


@pytest.fixture(params=["sqlite", "postgresql", "mysql", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    kind: str = request.param
    suffix = uuid.uuid4().hex[:10]
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'g.db'}"
    elif kind == "redis":
        need("redis")
        prefix = f"mideng-gauges-{suffix}"
        yield f"{REDIS_URL}?prefix={prefix}"
        import redis

        delete_prefix(redis.Redis.from_url(REDIS_URL), prefix)
    else:
        need(kind)
        base = POSTGRES_URL if kind == "postgresql" else MYSQL_URL
        table = f"gauges_{suffix}"
        yield f"{base}?table={table}"
        import sqlalchemy

        engine = sqlalchemy.create_engine(base)
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text(f"DROP TABLE IF EXISTS {table}"))
        engine.dispose()


def populate(store: Any) -> None:
    """3 finished orders, 2 payments whose holders died (their leases ran out 100 s ago),
    and 1 payment being processed under a live lease."""
    guard = Guard(store)
    for n in range(3):
        guard.run("orders", f"o-{n}", lambda n=n: n)
    for n in range(2):
        store.claim(ClaimRequest("payments", f"dead-{n}", uuid.uuid4().hex, -100.0, 3600.0))
    store.claim(ClaimRequest("payments", "live", uuid.uuid4().hex, 600.0, 3600.0))


def test_the_gauges_read_the_store(url: str) -> None:
    store = open_store(url)
    populate(store)
    reg = CollectorRegistry()
    gauges = metrics.watch_store(store, reg, interval=0, grace=30)
    name = gauges.name
    assert name == url.split("://", 1)[0]  # the URL's scheme, as the store errors' label
    assert series(reg, "mideng_records") == {
        (("scope", "orders"), ("status", "succeeded"), ("store", name)): 3,
        (("scope", "payments"), ("status", "processing"), ("store", name)): 3,
    }
    assert series(reg, "mideng_stuck_records") == {(("store", name),): 2}
    [age] = series(reg, "mideng_oldest_processing_age_seconds").values()
    assert 0 <= age < 600
    assert series(reg, "mideng_survey_errors_total") == {(("store", name),): 0}
    [stamp] = series(reg, "mideng_survey_timestamp_seconds").values()
    assert stamp > 1.7e9

    # The live payment finishes; the next survey (interval 0: every scrape) sees it.
    Guard(store).run("payments", "more", lambda: 1)
    assert (
        series(reg, "mideng_records")[
            (("scope", "payments"), ("status", "succeeded"), ("store", name))
        ]
        == 1
    )
    gauges.close()
    assert series(reg, "mideng_records") == {}
    store.close()


class Counting:
    """A store whose surveys are counted, and fail while ``down`` is set."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.url = "memory://"
        self.surveys = 0
        self.down = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def survey(self, *args: Any, **kwargs: Any) -> Any:
        self.surveys += 1
        self.entered.set()
        assert self.release.wait(10)
        if self.down:
            raise ConnectionError("store unreachable")
        return self.inner.survey(*args, **kwargs)


def test_one_survey_per_interval_however_often_scraped() -> None:
    store = Counting(open_store("memory://"))
    populate(store.inner)
    reg = CollectorRegistry()
    metrics.watch_store(store, reg, interval=3600, grace=30)
    for _ in range(5):
        assert series(reg, "mideng_stuck_records") == {(("store", "memory"),): 2}
    assert store.surveys == 1


def test_a_scrape_during_a_survey_answers_from_the_last_one() -> None:
    store = Counting(open_store("memory://"))
    populate(store.inner)
    reg = CollectorRegistry()
    metrics.watch_store(store, reg, interval=0, grace=30)
    assert series(reg, "mideng_stuck_records") == {(("store", "memory"),): 2}
    store.entered.clear()
    store.release.clear()
    slow = threading.Thread(target=series, args=(reg, "mideng_records"))
    slow.start()
    assert store.entered.wait(10)  # the first scrape is inside its survey
    # Others do not wait for it, nor start a second survey: they get the last one.
    for _ in range(3):
        assert series(reg, "mideng_stuck_records") == {(("store", "memory"),): 2}
    assert store.surveys == 2
    store.release.set()
    slow.join(10)


def test_a_failing_survey_is_counted_and_the_scrape_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = Counting(open_store("memory://"))
    populate(store.inner)
    reg = CollectorRegistry()
    metrics.watch_store(store, reg, interval=0, grace=30, name="payments-db")
    assert series(reg, "mideng_stuck_records") == {(("store", "payments-db"),): 2}
    [stamp] = series(reg, "mideng_survey_timestamp_seconds").values()
    store.down = True
    with caplog.at_level(logging.WARNING, "mideng"):
        got = series(reg, "mideng_stuck_records")
        errors = series(reg, "mideng_survey_errors_total")
    assert got == {(("store", "payments-db"),): 2}  # the last good survey
    assert errors == {(("store", "payments-db"),): 2}  # both scrapes tried and failed
    assert series(reg, "mideng_survey_timestamp_seconds") == {(("store", "payments-db"),): stamp}
    assert any("could not survey the payments-db store" in r.getMessage() for r in caplog.records)


def test_a_store_without_a_survey_is_refused() -> None:
    with pytest.raises(TypeError, match="can't be surveyed"):
        metrics.watch_store(object(), CollectorRegistry())
