"""NATS JetStream (nats-py), in the inner shape every broker package has: the adapter that
feeds a durable pull consumer's messages to a consumer and carries out its verdicts
(``consume``), a message read as a Message and a dead letter's copy (``message``), the
publisher ``open_publisher("nats://…")`` opens (``publish.NatsPublisher``).
"""

from __future__ import annotations

from mideng.messaging.consumer import UNDECIDED_DELAY, Consumer
from mideng.messaging.nats.consume import LOOK_INTERVAL, consume
from mideng.messaging.nats.message import (
    DEAD_HEADERS,
    DEAD_LETTER_REASON,
    NATS_MSG_ID,
    message_of,
)

__all__ = [
    "DEAD_HEADERS",
    "DEAD_LETTER_REASON",
    "LOOK_INTERVAL",
    "NATS_MSG_ID",
    "UNDECIDED_DELAY",
    "Consumer",
    "consume",
    "message_of",
]
