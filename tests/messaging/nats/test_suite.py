"""NATS JetStream through the base suite (tests/messaging/base), on a fresh stream and
durable."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mideng.messaging import nats as adapter
from tests.brokers import BrokerNames
from tests.messaging.base import BrokerSuite
from tests.messaging.base.broker import Broker
from tests.messaging.nats.broker import JetStream

pytestmark = pytest.mark.slow

#: As another client sends them; no business key, so the message is dead-lettered at once.
SENT = {
    "trace": b"span-\xff\xfe",
    "x/route": b"eu-1",
    "note": b"caf\xc3\xa9",
    adapter.NATS_MSG_ID: b"evt-7",
}


class TestNats(BrokerSuite):
    sent_headers = SENT
    # PostgreSQL is the storms' database on RabbitMQ and Kafka; NATS and Redis Streams take
    # MariaDB, so each database meets a storm on two brokers (each storm takes tens of seconds).
    storm_databases = ("mariadb",)
    between_kills = (0.1, 0.6)

    @pytest.fixture
    def broker(self, broker_names: BrokerNames) -> JetStream:
        return JetStream(broker_names.nats())

    def copied_headers(self, reason: str, sent: list[str]) -> Any:
        """Every header nats-py read: one whose value it could only decode with replacement
        characters (once left out of the copy), and one whose name it reads but will not
        write, not being an HTTP token (the copy was refused on every try, and the message
        nak'd and dead-lettered again for good); that one rides in ``x-dead-letter-headers``,
        as JSON."""
        return {
            # nats-py replaced the bytes that are not UTF-8 before the adapter saw them
            "trace": "span-\ufffd\ufffd",
            "note": "caf\xe9",
            adapter.DEAD_HEADERS: json.dumps({"x/route": "eu-1"}),
            adapter.NATS_MSG_ID: "evt-7:dead-letter",
            adapter.DEAD_LETTER_REASON: reason,
        }

    def test_a_connection_reset_under_nats_py_s_own_reconnects_reruns_nothing(
        self, broker: Broker
    ) -> None:
        """With nats-py's own reconnects on, it rides out the reset by itself (the adapter has
        nothing to log); every key still runs once and nothing is left unacked."""
        self.dropped_under_the_handlers(broker, allow_reconnect=True)
