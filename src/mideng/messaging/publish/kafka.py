"""Deprecated: Kafka's publisher is ``mideng.messaging.kafka.publish``; this module goes in
the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from mideng.messaging.kafka import publish
from mideng.moved import old_module

__getattr__ = old_module(__name__, dict.fromkeys(("KafkaPublisher", "bootstrap"), publish))
