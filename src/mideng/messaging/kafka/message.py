"""Kafka's messages: a record read as a ``Message``, and the headers of the copy a dead letter
leaves.

``Message.id`` is ``topic:partition:offset``; Kafka tells no delivery attempt. A record's
headers are read as text (``headers.text_headers``); its null value is an empty body.
"""

from __future__ import annotations

from typing import Any

from mideng.messaging.headers import text_headers
from mideng.messaging.message import Message

#: The header a dead-lettered copy carries: why it was given up on.
DEAD_LETTER_REASON = "x-dead-letter-reason"


def message_of(record: Any) -> Message:
    headers = text_headers(record.headers or ())
    body = record.value if record.value is not None else b""
    return Message(
        body, headers, f"{record.topic}:{record.partition}:{record.offset}", None, record
    )


def dead_headers(record: Any, reason: str) -> list[tuple[str, bytes]]:
    """The dead-letter copy's headers: the record's own, byte for byte (a null, bytes that are
    not UTF-8: ``Message.headers`` holds only their text), and the reason."""
    return [*(record.headers or ()), (DEAD_LETTER_REASON, reason.encode())]
