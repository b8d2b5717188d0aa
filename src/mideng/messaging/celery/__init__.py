"""Celery: ``idempotent_task``, a task that runs once per business key however often the broker
delivers it (``consume``).

A task queue, not a broker adapter, so the package holds only the consuming side: Celery's own
worker fetches, acks and retries the task messages, so there is no adapter loop and no
Message, and a task is sent with Celery's own ``delay`` / ``apply_async`` (the key is rendered
from the business arguments at the worker), so there is nothing for a mideng publisher to add.
"""

from __future__ import annotations

from mideng.messaging.celery.consume import idempotent_task

__all__ = ["idempotent_task"]
