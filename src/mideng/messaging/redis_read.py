"""Deprecated: the compact read of new stream entries is ``mideng.messaging.redis_streams.message``;
this module goes in the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from mideng.messaging.redis_streams import message
from mideng.moved import old_module

__getattr__ = old_module(
    __name__, dict.fromkeys(("BODY", "CACHED_COUNTS", "READ", "CompactReader", "entries"), message)
)
