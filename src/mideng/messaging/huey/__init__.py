"""Huey: ``idempotent_job``, a task that holds one pending task per business key and runs once
per key however often it is delivered (``consume``).

A task queue, not a broker adapter, so the package holds only the task's side: Huey's own
consumer fetches and runs the tasks, and ``enqueue`` sends through the Huey instance.
"""

from __future__ import annotations

from mideng.messaging.huey.consume import idempotent_job

__all__ = ["idempotent_job"]
