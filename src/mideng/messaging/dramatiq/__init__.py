"""Dramatiq: ``idempotent_actor``, an actor that holds one pending message per business key and
runs once per key however often it is delivered (``consume``).

A task queue, not a broker adapter, so the package holds only the actor's side: Dramatiq's own
worker fetches and acks the messages, on RabbitMQ or Redis, and ``enqueue`` sends through the
actor's broker.
"""

from __future__ import annotations

from mideng.messaging.dramatiq.consume import idempotent_actor

__all__ = ["idempotent_actor"]
