"""arq: ``idempotent_job``, an async job that holds one pending job per business key and runs
once per key however often it is delivered (``consume``).

A task queue, not a broker adapter, so the package holds only the job's side: arq's own worker
fetches and runs the jobs, and ``enqueue`` sends through arq's own ``enqueue_job``.
"""

from __future__ import annotations

from mideng.messaging.arq.consume import idempotent_job

__all__ = ["idempotent_job"]
