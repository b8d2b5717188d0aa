"""Message consumers that run once per business key, and the broker adapters that feed them.

``IdempotentConsumer`` decides each delivered ``Message`` (run once, ack a duplicate, retry,
dead-letter); an adapter module per broker (``mideng.messaging.rabbitmq``,
``mideng.messaging.redis_streams``, ...) fetches messages and carries out the verdicts.
"""

from __future__ import annotations

from mideng.messaging.consumer import IdempotentConsumer
from mideng.messaging.message import Message
from mideng.messaging.verdict import Ack, DeadLetter, Retry, RetryRules, Verdict

__all__ = ["Ack", "DeadLetter", "IdempotentConsumer", "Message", "Retry", "RetryRules", "Verdict"]
