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
