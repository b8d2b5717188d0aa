"""Deprecated: NATS's publisher is ``mideng.messaging.nats.publish``; this module goes in
the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from mideng.messaging.nats import publish
from mideng.moved import old_module

__getattr__ = old_module(
    __name__,
    dict.fromkeys(("CONNECT_ATTEMPTS", "MSG_ID", "RECONNECT_WAIT", "NatsPublisher"), publish),
)
