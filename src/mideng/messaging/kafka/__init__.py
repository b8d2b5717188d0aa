"""Kafka (aiokafka), in the inner shape every broker package has: the adapter that feeds a
consumer group member's records to a consumer and commits past what it settled (``consume``),
a record read as a Message and a dead letter's copy (``message``), the publisher
``open_publisher("kafka://…")`` opens (``publish.KafkaPublisher``).
"""

from __future__ import annotations

from mideng.messaging.consumer import UNDECIDED_DELAY, Consumer
from mideng.messaging.kafka.consume import CLOSE_TIMEOUT, bootstrap_servers, consume
from mideng.messaging.kafka.message import DEAD_LETTER_REASON, message_of

__all__ = [
    "CLOSE_TIMEOUT",
    "DEAD_LETTER_REASON",
    "UNDECIDED_DELAY",
    "Consumer",
    "bootstrap_servers",
    "consume",
    "message_of",
]
