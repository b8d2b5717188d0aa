"""The Redis Streams storm without kills on the non-transactional Redis store: 2,000 entries
over 1,500 business keys, three consumer processes in one group, one handler run per key.
(The storm with kills, and the crash points: the base suite's.)"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import redis

from tests.brokers import BrokerNames
from tests.helpers.storm import Workers, storm_messages, wait_for
from tests.messaging.redis_streams.broker import RedisStreams
from tests.services import REDIS_URL

pytestmark = pytest.mark.slow

MESSAGES, KEYS = 2000, 1500


def test_storm_on_the_redis_store_runs_each_key_once(
    broker_names: BrokerNames, tmp_path: Path
) -> None:
    side = RedisStreams(broker_names)
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
