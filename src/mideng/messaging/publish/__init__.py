"""Publishing: one ``Publisher`` protocol; each broker's publisher (its package's ``publish``
module), chosen by URL scheme through the broker registry (``mideng.messaging.brokers``).

``open_publisher("amqp://…")`` (RabbitMQ, publisher confirms), ``"nats://…"`` (JetStream,
``Nats-Msg-Id``), ``"redis://…"`` (a stream entry per message), ``"kafka://host:port"``
(the message key is the business key). Each publisher imports its client on first use and
says which extra installs it.

Every message mideng publishes carries its message id (``message-id``), the business key
(``idempotency-key``) and the request id current when it was produced (``x-request-id``):
``outgoing`` builds such a message for code that publishes directly, and the outbox fixes the
same headers when it writes a row. A consumer reads them back (``mideng.messaging.headers``).
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from mideng.context import get_request_id
from mideng.errors import ConfigurationError
from mideng.messaging.brokers import for_scheme, schemes
from mideng.messaging.headers import IDEMPOTENCY_KEY, MESSAGE_ID, REQUEST_ID
from mideng.stores.registry import load

__all__ = ["Outgoing", "Publisher", "check_options", "open_publisher", "outgoing", "publish"]


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to publish. ``destination`` is the queue / routing key, subject, stream or
    topic; ``key`` the business key (Kafka's message key); ``headers`` include ``message-id``."""

    destination: str
    body: bytes
    message_id: str
    key: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class Publisher(Protocol):
    """A broker connection that publishes one message at a time and returns only once the
    broker has it (a confirm, a JetStream ack, an XADD reply, a Kafka ack), raising if not."""

    async def start(self) -> None: ...

    async def publish(self, message: Outgoing) -> None: ...

    async def close(self) -> None: ...


def open_publisher(url: str, **options: Any) -> Publisher:
    """The publisher for ``url``'s scheme (not yet connected: ``await start()``). An option
    that publisher does not take is a ``ConfigurationError`` (``exchange`` goes with amqp://
    only)."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    broker = for_scheme(scheme)
    if broker is None:
        raise ConfigurationError(
            f"no publisher for {url!r}; mideng publishes to {', '.join(schemes())}"
        )
    cls: Any = load(broker.publisher)
    check_options(cls, options, f"a {scheme}:// publisher")
    publisher: Publisher = cls(url, **options)
    return publisher


def check_options(call: Callable[..., Any], options: Mapping[str, Any], what: str) -> None:
    """Refuse an option ``call`` does not take, by name, before anything is called: passed on,
    it is a TypeError from inside a client, at its first connect, that names no option."""
    try:
        inspect.signature(call).bind_partial(**options)
    except TypeError as exc:
        raise ConfigurationError(f"{what} takes no such option: {exc}") from None


def outgoing(
    destination: str,
    body: bytes,
    *,
    key: str | None,
    headers: Mapping[str, str] | None = None,
    message_id: str | None = None,
) -> Outgoing:
    """A message with mideng's headers: its message id, the business key and the current
    request id. The id defaults to the business key, so publishing one business event twice
    sends one id twice and a consumer dedupes it; without a key, a fresh id."""
    message_id = message_id or key or str(uuid.uuid4())
    out: dict[str, str] = {}
    for name, value in (headers or {}).items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ConfigurationError(f"message headers are str -> str: {name!r}: {value!r}")
        out[name] = value
    out[MESSAGE_ID] = message_id
    if key is not None:
        out[IDEMPOTENCY_KEY] = key
    request_id = get_request_id()
    if request_id is not None:
        out.setdefault(REQUEST_ID, request_id)
    return Outgoing(destination, body, message_id, key, out)


async def publish(
    publisher: Publisher,
    destination: str,
    body: bytes,
    *,
    key: str | None,
    headers: Mapping[str, str] | None = None,
    message_id: str | None = None,
) -> str:
    """Publish ``body`` with the business key and the current request id as headers; the
    message id it was given (``outgoing`` says how it is chosen)."""
    message = outgoing(destination, body, key=key, headers=headers, message_id=message_id)
    await publisher.publish(message)
    return message.message_id
