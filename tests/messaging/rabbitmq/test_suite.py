"""RabbitMQ through the base suite (tests/messaging/base), on a fresh durable queue."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from mideng.messaging import rabbitmq
from tests.brokers import BrokerNames
from tests.messaging.base import BrokerSuite
from tests.messaging.base.broker import Broker, key
from tests.messaging.rabbitmq.broker import RabbitMQ

#: As a producer in another language sends them: bytes as long strings, floats as doubles.
SENT: dict[str, Any] = {
    "trace": b"span-\xff\xfe",
    "note": "caf\xe9",
    "nested": {"inner": b"\xff\x00", "text": "ok", "deep": [b"\xfe", 7]},
    "list": [b"a\xff", "b", {"x": b"\xc3"}],
    "raw": bytearray(b"\x00\xff"),
    "amount": Decimal("-1.5"),
    "ratio": 0.1,
    "huge": 1e300,
    "half": 0.5,
    "count": 3,
    "flag": True,
    "none": None,
}

#: The copy as the broker hands it out: every value as the original was read, its bytes kept
#: (a long string that is not UTF-8 goes as a byte array: the same bytes); a double that
#: single precision, pamqp's only float, cannot hold goes as its text. (pamqp reads a long
#: string that is not UTF-8 as bytes and refused to write bytes back; it writes floats only
#: in single precision, so it refused one out of that range and rounded the rest: the copy
#: could never be made, and the message was requeued every second, for good.)
COPIED: dict[str, Any] = {
    "trace": bytearray(b"span-\xff\xfe"),
    "note": "caf\xe9",
    "nested": {"inner": bytearray(b"\xff\x00"), "text": "ok", "deep": [bytearray(b"\xfe"), 7]},
    "list": [bytearray(b"a\xff"), "b", {"x": bytearray(b"\xc3")}],
    "raw": bytearray(b"\x00\xff"),
    "amount": Decimal("-1.5"),
    "ratio": "0.1",
    "huge": "1e+300",
    "half": 0.5,
    "count": 3,
    "flag": True,
    "none": None,
}


class TestRabbitMQ(BrokerSuite):
    sent_headers = SENT
    between_kills = (0.3, 1.2)
    storm_timeout = 150.0

    @pytest.fixture
    def broker(self, broker_names: BrokerNames) -> RabbitMQ:
        return RabbitMQ(broker_names)

    def copied_headers(self, reason: str, sent: list[str]) -> Any:
        return {**COPIED, rabbitmq.DEAD_REASON: reason}

    def test_a_dead_copy_carries_the_headers_as_they_came(self, broker: Broker) -> None:
        assert self.copied(broker).raw.message_id == "m0"  # and the message's own id

    def test_a_failed_run_goes_back_and_runs_again_after_its_delay(self, broker: Broker) -> None:
        runs = [m for m in self.retried(broker) if key(m) == "order:1"]
        # Requeued after the delay, and delivered again: not a new message.
        assert [m.raw.redelivered for m in runs] == [False, True]
