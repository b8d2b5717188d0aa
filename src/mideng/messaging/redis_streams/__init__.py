"""Redis Streams (redis-py), in the inner shape every broker package has: the adapter that
feeds a consumer group member's entries to a consumer and carries out its verdicts
(``consume``), an entry read as a Message, one at a time or many in one compact reply, and a
dead letter's entry (``message``), the publisher ``open_publisher("redis://…")`` opens
(``publish.RedisPublisher``).
"""

from __future__ import annotations

from mideng.messaging.redis_streams.consume import consume
from mideng.messaging.redis_streams.message import BODY, message_of

__all__ = ["BODY", "consume", "message_of"]
