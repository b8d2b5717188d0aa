"""RabbitMQ's messages: a delivery read as a ``Message``, and the copy a dead letter leaves.

``Message.id`` is the AMQP ``message_id``; ``attempt`` comes from a quorum queue's
``x-delivery-count``. A dead-letter copy carries the delivery's body, id, content type and
headers as they came (``headers.amqp_copy``), with the reason in ``x-dead-reason``.
"""

from __future__ import annotations

from typing import Any

from mideng.messaging.headers import amqp_copy, text_headers
from mideng.messaging.message import Message
from mideng.stores.registry import require

#: The header a dead-letter copy carries: why it was given up on (its first 1000 characters).
DEAD_REASON = "x-dead-reason"


def message_of(incoming: Any) -> Message:
    headers = text_headers((incoming.headers or {}).items())
    count = headers.get("x-delivery-count")
    attempt = int(count) + 1 if count is not None and count.isdigit() else None
    return Message(bytes(incoming.body), headers, incoming.message_id, attempt, incoming)


def dead_copy(incoming: Any, reason: str) -> Any:
    """The persistent ``aio_pika.Message`` a dead-letter queue is given for ``incoming``."""
    aio_pika = require("aio_pika", "rabbitmq")
    return aio_pika.Message(
        bytes(incoming.body),
        headers={**amqp_copy(incoming.headers or {}), DEAD_REASON: reason[:1000]},
        message_id=incoming.message_id,
        content_type=incoming.content_type,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
    )
