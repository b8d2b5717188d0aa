"""Redis Streams through the base suite (tests/messaging/base), on a fresh stream and group."""

from __future__ import annotations

from typing import Any

import pytest

from tests.brokers import BrokerNames
from tests.messaging.base import BrokerSuite
from tests.messaging.redis_streams.broker import DEAD_FROM, DEAD_REASON, RedisStreams

#: An entry of bytes that are not UTF-8, in its body, a value and a name, and no key: its
#: copy once held replacement characters.
KEYLESS = {b"body": b"\xfe{}", b"trace": b"span-\xff\xfe", b"caf\xe9": b"x"}


class TestRedisStreams(BrokerSuite):
    sent_headers = KEYLESS
    sent_body = KEYLESS[b"body"]
    storm_databases = ("mariadb",)  # PostgreSQL on RabbitMQ and Kafka (see TestNats)
    between_kills = (0.3, 1.2)
    storm_timeout = 150.0

    @pytest.fixture
    def broker(self, broker_names: BrokerNames) -> RedisStreams:
        return RedisStreams(broker_names)

    def copied_headers(self, reason: str, sent: list[str]) -> Any:
        """The entry byte for byte, and where it came from and why."""
        [entry] = sent
        return {**KEYLESS, DEAD_FROM: entry.encode(), DEAD_REASON: reason.encode()}
