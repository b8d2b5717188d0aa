"""The brokers mideng consumes from and publishes to, found by name or by a URL's scheme.

Each is a package of the same inner shape under ``mideng.messaging``: its adapter
(``consume``), its messages (``message``) and its publisher (``publish``). The registry names
the adapter's ``consume`` and the publisher class as lazy ``"module:attr"`` strings, so a
broker's client is imported only when it is used, and says which URL schemes open the
publisher (``mideng.messaging.publish.open_publisher``).

    consume = adapter("kafka")        # mideng.messaging.kafka.consume.consume
    for_scheme("amqps")               # BROKERS["rabbitmq"], whose publisher open_publisher opens

Celery, RQ, arq, Dramatiq and Huey are task queues, not broker adapters: their workers consume
and their own sends publish, so they have no entry here (``mideng.messaging.celery``,
``.rq``, ``.arq``, ``.dramatiq``, ``.huey``; the last four share ``mideng.messaging.task_queue``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mideng.errors import ConfigurationError
from mideng.stores.registry import load


@dataclass(frozen=True, slots=True)
class Broker:
    """One broker package: the URL schemes its publisher is opened by, its adapter's
    ``consume`` and its publisher class (``"module:attr"``)."""

    schemes: tuple[str, ...]
    consume: str
    publisher: str


BROKERS: dict[str, Broker] = {
    "rabbitmq": Broker(
        ("amqp", "amqps"),
        "mideng.messaging.rabbitmq.consume:consume",
        "mideng.messaging.rabbitmq.publish:AmqpPublisher",
    ),
    "nats": Broker(
        ("nats", "tls"),
        "mideng.messaging.nats.consume:consume",
        "mideng.messaging.nats.publish:NatsPublisher",
    ),
    "redis_streams": Broker(
        ("redis", "rediss"),
        "mideng.messaging.redis_streams.consume:consume",
        "mideng.messaging.redis_streams.publish:RedisPublisher",
    ),
    "kafka": Broker(
        ("kafka",),
        "mideng.messaging.kafka.consume:consume",
        "mideng.messaging.kafka.publish:KafkaPublisher",
    ),
    # In this process only (mideng.messaging.in_process): no client, nothing to install.
    "memory": Broker(
        ("memory",),
        "mideng.messaging.memory.consume:consume",
        "mideng.messaging.memory.publish:MemoryPublisher",
    ),
}


def named(name: str) -> Broker:
    """The broker called ``name`` (its package's name under ``mideng.messaging``)."""
    found = BROKERS.get(name)
    if found is None:
        raise ConfigurationError(f"no broker {name!r}; mideng has {', '.join(sorted(BROKERS))}")
    return found


def for_scheme(scheme: str) -> Broker | None:
    """The broker a URL of ``scheme`` names, if any."""
    for broker in BROKERS.values():
        if scheme in broker.schemes:
            return broker
    return None


def schemes() -> list[str]:
    """Every URL scheme a publisher is opened by, sorted."""
    return sorted(scheme for broker in BROKERS.values() for scheme in broker.schemes)


def adapter(name: str) -> Callable[..., Any]:
    """The ``consume`` of broker ``name``'s adapter: ``await consume(consumer, url, ..., stop)``."""
    consume: Callable[..., Any] = load(named(name).consume)
    return consume
