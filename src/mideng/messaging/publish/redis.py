"""Deprecated: the Redis Streams publisher is ``mideng.messaging.redis_streams.publish``; this
module goes in the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from mideng.messaging.redis_streams import publish
from mideng.moved import old_module

__getattr__ = old_module(__name__, dict.fromkeys(("BODY", "RedisPublisher"), publish))
