"""Kafka through the base suite (tests/messaging/base), on a fresh topic of the session's
Tansu broker."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from mideng.messaging import kafka as adapter
from tests.brokers import BrokerNames, KafkaBroker
from tests.messaging.base import BrokerSuite
from tests.messaging.base.broker import Broker
from tests.messaging.base.reconnect import reconnects_logged
from tests.messaging.kafka.broker import Kafka

pytestmark = pytest.mark.slow

#: A null stays a null and bytes that are not UTF-8 stay those bytes (the copy was made from
#: the headers' text, a null as b"None" and bad bytes as replacement characters); no key.
HEADERS = [("trace", None), ("span", b"\xff\xfe"), ("note", b"caf\xc3\xa9")]


class TestKafka(BrokerSuite):
    sent_headers = HEADERS

    @pytest.fixture
    def broker(self, broker_names: BrokerNames, kafka_broker: KafkaBroker, tmp_path: Path) -> Kafka:
        return Kafka(broker_names.kafka(kafka_broker), logs=tmp_path)

    def copied_headers(self, reason: str, sent: list[str]) -> Any:
        """The record's own headers, byte for byte, and the reason."""
        return [*HEADERS, (adapter.DEAD_LETTER_REASON, reason.encode())]

    def test_a_connection_dropped_after_the_handlers_before_the_acks_reruns_nothing(
        self, broker: Broker, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Kafka's ack is the offset commit, which the member makes again on its new
        connection: the records whose commit was cut are not handed out again unless the
        group moved them meanwhile, and a key's second record in one batch is settled with
        the first, so no replay need be logged; every key still runs once and every offset is
        committed (the scenario's own checks). And the stop that follows ends ``consume``
        cleanly: aiokafka's ``Fetcher.close()`` re-raises the cancellation of a fetch task the
        reset left pending, which ended ``stop()`` cancelled; that is no LeaveGroup left
        unanswered."""
        with caplog.at_level(logging.WARNING):
            self.dropped_under_the_handlers(broker)
        reconnects_logged(broker, caplog, each=True)
        assert "left the consumer group without the broker's answer" not in caplog.text
