"""Redis Streams: the storm with kills on PostgreSQL and on MariaDB, the storm without kills on
the non-transactional Redis store, and both crash cases with real kills."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.brokers import BrokerNames
from tests.messaging.storm import DATABASES, StreamSide, Tables, Workers, storm_messages, wait_for
from tests.messaging.storms import KEYS, MESSAGES, crash, storm
from tests.services import REDIS_URL, need

pytestmark = pytest.mark.slow


@pytest.fixture(params=["postgresql", "mysql"])
def db(request: pytest.FixtureRequest) -> Iterator[Tables]:
    need(request.param)
    made = Tables(DATABASES[request.param])
    made.create()
    yield made
    made.drop()


def test_storm_with_kills(broker_names: BrokerNames, db: Tables, tmp_path: Path) -> None:
    storm(StreamSide(broker_names), db, tmp_path)


def test_storm_on_the_redis_store_runs_each_key_once(
    broker_names: BrokerNames, tmp_path: Path
) -> None:
    side = StreamSide(broker_names)
    hits = broker_names.redis_key("hits")
    prefix = f"mideng:test:consumer:{uuid.uuid4().hex[:12]}"
    side.publish(storm_messages(MESSAGES, KEYS, 7))
    config = {"broker": side.broker, "url": side.url, "adapter": side.adapter(), "mode": "store"}
    config.update(redis_url=REDIS_URL, hits=hits, prefix=prefix)
    pool = Workers(tmp_path, config)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        for slot in range(3):
            pool.start(slot)
        wait_for(lambda: client.hlen(hits) >= KEYS and side.settled(), 60, "every key run")
        assert pool.stop_all() == [0, 0, 0], pool.logs()
        raw: dict[bytes, bytes] = client.hgetall(hits)  # type: ignore[assignment]
        counts = {k.decode(): int(v) for k, v in raw.items()}
        assert sorted(counts) == sorted(f"order:{n}" for n in range(KEYS))
        assert set(counts.values()) == {1}, {k: v for k, v in counts.items() if v != 1}
    finally:
        pool.stop_all()
        for name in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(name)
        client.close()


@pytest.fixture
def pg() -> Iterator[Tables]:
    need("postgresql")
    made = Tables(DATABASES["postgresql"])
    made.create()
    yield made
    made.drop()


def test_a_kill_before_the_commit_runs_it_again(
    broker_names: BrokerNames, pg: Tables, tmp_path: Path
) -> None:
    runs = crash(StreamSide(broker_names), pg, tmp_path, "before_commit")
    assert runs["order:crash"] == 2


def test_a_kill_after_the_commit_acks_the_redelivery_without_running(
    broker_names: BrokerNames, pg: Tables, tmp_path: Path
) -> None:
    runs = crash(StreamSide(broker_names), pg, tmp_path, "after_commit")
    assert runs["order:crash"] == 1
