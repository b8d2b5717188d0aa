"""Message consumers that run once per business key, and the broker adapters that feed them.

``IdempotentConsumer`` decides each delivered ``Message`` (run once, ack a duplicate, retry,
dead-letter); ``OperationConsumer`` runs a multi-step operation per message, resumed on a
redelivery. Each broker is a package of one inner shape (``mideng.messaging.rabbitmq``,
``nats``, ``redis_streams``, ``kafka``: ``consume``, the adapter that fetches messages and
carries out the verdicts; ``message``; ``publish``), found by name in ``brokers``.
"""

from __future__ import annotations

from mideng.messaging.consumer import IdempotentConsumer
from mideng.messaging.message import Message
from mideng.messaging.operation_consumer import OperationConsumer
from mideng.messaging.verdict import Ack, DeadLetter, Retry, RetryRules, Verdict

__all__ = [
    "Ack",
    "DeadLetter",
    "IdempotentConsumer",
    "Message",
    "OperationConsumer",
    "Retry",
    "RetryRules",
    "Verdict",
]
