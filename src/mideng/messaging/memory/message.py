"""The in-process broker's messages: a taken delivery read as a ``Message``, and the headers
of the copy a dead letter leaves.

``Message.id`` is the publisher's message id (the ``message-id`` mideng's publishers set),
else the message's place in the broker; ``attempt`` is how many times it was taken.
"""

from __future__ import annotations

from collections.abc import Mapping

from mideng.messaging.in_process import Delivery
from mideng.messaging.message import Message

#: The header a dead-lettered copy carries: why it was given up on.
DEAD_LETTER_REASON = "x-dead-letter-reason"


def message_of(delivery: Delivery) -> Message:
    return Message(
        delivery.body, dict(delivery.headers), delivery.message_id, delivery.deliveries, delivery
    )


def dead_headers(headers: Mapping[str, str], reason: str) -> dict[str, str]:
    """The copy's headers: the message's own, as they came, and the reason."""
    return {**headers, DEAD_LETTER_REASON: reason}
