"""RQ: ``idempotent_job``, a job that holds one pending job per business key and runs once per
key however often it is delivered (``consume``).

A task queue, not a broker adapter, so the package holds only the job's side: RQ's own worker
fetches and runs the jobs, and ``enqueue`` sends through RQ's own ``Queue.enqueue_call``.
"""

from __future__ import annotations

from mideng.messaging.rq.consume import idempotent_job

__all__ = ["idempotent_job"]
