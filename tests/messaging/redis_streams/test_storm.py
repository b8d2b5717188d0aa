"""Redis Streams storm: 2,000 messages over 1,500 business keys (the rest re-published as new
entries), three transactional consumer processes in one consumer group (on PostgreSQL, and on
MariaDB), one of them SIGKILLed at random points five times and restarted, its pending entries
taken over by the others. At the end every key has exactly one committed effect, every record
succeeded, every worker stopped cleanly on SIGTERM, and the group holds nothing pending. And
the storm without kills on the non-transactional Redis store: one handler run per key. (The
crash points: tests/messaging/test_crashes.py.)"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import redis

from tests.brokers import BrokerNames
from tests.helpers.storm import (
    Workers,
    check_storm,
    on_each_database,
    run_storm,
    storm_messages,
    tables,
    wait_for,
)
from tests.messaging.redis_streams.conftest import StreamSide
from tests.services import REDIS_URL, need

pytestmark = pytest.mark.slow

MESSAGES, KEYS = 2000, 1500


@on_each_database
def test_storm_with_kills(
    broker_names: BrokerNames, tmp_path: Path, service: str, url: str
) -> None:
    need(service)
    side = StreamSide(broker_names)
    with tables(url) as db:
        result = run_storm(side, db, tmp_path, between_kills=(0.3, 1.2), timeout=150)
    check_storm(result, keys=KEYS)
    assert side.settled()


def test_storm_on_the_redis_store_runs_each_key_once(
    broker_names: BrokerNames, tmp_path: Path
) -> None:
    side = StreamSide(broker_names)
    hits = broker_names.redis_key("hits")
    prefix = f"mideng:test:consumer:{uuid.uuid4().hex[:12]}"
    side.publish(storm_messages(MESSAGES, KEYS, 7))
    config = {"mode": "store", "redis_url": REDIS_URL, "hits": hits, "prefix": prefix}
    pool = Workers(tmp_path, side, config)
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
