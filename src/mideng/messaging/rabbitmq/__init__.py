"""RabbitMQ (aio-pika), in the inner shape every broker package has: the adapter that feeds a
queue's deliveries to a consumer and carries out its verdicts (``consume``), a delivery read as
a Message and a dead letter's copy (``message``), the publisher ``open_publisher("amqp://…")``
opens (``publish.AmqpPublisher``).
"""

from __future__ import annotations

from mideng.messaging.rabbitmq.consume import (
    COPY_RETRY_DELAY,
    ChannelLost,
    ConnectionLost,
    ConsumerCancelled,
    consume,
)
from mideng.messaging.rabbitmq.message import DEAD_REASON, message_of

__all__ = [
    "COPY_RETRY_DELAY",
    "DEAD_REASON",
    "ChannelLost",
    "ConnectionLost",
    "ConsumerCancelled",
    "consume",
    "message_of",
]
