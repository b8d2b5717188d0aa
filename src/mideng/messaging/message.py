"""A delivered message as every broker adapter hands it to the consumer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Message:
    """One delivery. ``id`` is the broker's own id for it (AMQP ``message_id``, the JetStream
    stream sequence or ``Nats-Msg-Id``, the Redis entry id, ``topic:partition:offset``);
    ``attempt`` is the delivery attempt (1 for the first) where the broker tells it, else None.
    ``raw`` is the broker client's own message object, for the adapter that acks it."""

    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    id: str | None = None
    attempt: int | None = None
    raw: Any = field(default=None, repr=False, compare=False)


# A Message made field by field: a frozen dataclass's __init__ sets each field through
# object.__setattr__ from a Python frame, which costs more than an adapter's parsing of a short
# entry; the slots' own setters do the same without the frame (tests compare the two).
_new = object.__new__
_set_body, _set_headers, _set_id, _set_attempt, _set_raw = (
    Message.__dict__[name].__set__ for name in ("body", "headers", "id", "attempt", "raw")
)


def build(
    body: bytes, headers: Mapping[str, str], id: str | None, attempt: int | None, raw: Any
) -> Message:
    """``Message(body, headers, id, attempt, raw)``, for an adapter's hot loop."""
    message: Message = _new(Message)
    _set_body(message, body)
    _set_headers(message, headers)
    _set_id(message, id)
    _set_attempt(message, attempt)
    _set_raw(message, raw)
    return message
