"""RQ's side of a guarded job: one pending job per business key, one run per key.

    @idempotent_job(guard, "stock", key="order:{order_id}", retry=Retry(max=3))
    def deduct_stock(order_id: str, quantity: int) -> dict[str, int]:
        ...

    deduct_stock.enqueue(queue, "1001", 2)     # Enqueued(key, job_id, Enqueue.QUEUED)
    deduct_stock.enqueue(queue, "1001", 2)     # nothing sent: Enqueue.PENDING, the first job's id

The job's RQ id is the one mideng minted for it (``Job.fetch(answer.job_id)``), fresh for each
sent job, so a reused id never overwrites or duplicates a job RQ holds. A worker that dies
mid-job leaves the job in RQ's started registry; RQ's cleanup retries it when it has retries
left (``retry=``), and that delivery replays the first run's result or, when the first run
never finished, runs it (mideng.messaging.task_queue has the rules). The module attribute is
the job RQ's worker imports and calls by name, so the decorated function must be importable as
``module.name``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mideng.core.keys import KeySpec
from mideng.guard.guard import Guard
from mideng.messaging.task_queue import Enqueued, GuardedJob, QueueJob, job_maker
from mideng.stores.registry import require


class RqJob(QueueJob):
    """A guarded function RQ runs by name: called by the worker, sent with ``enqueue``."""

    def __init__(self, job: GuardedJob, options: dict[str, Any]) -> None:
        super().__init__(job)
        self.options = options
        self.name = f"{job.fn.__module__}.{job.fn.__qualname__}"
        self.__module__ = job.fn.__module__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """One delivery, in RQ's worker."""
        return self.job.run(args, kwargs, _will_retry)

    def enqueue(self, queue: Any, *args: Any, **kwargs: Any) -> Enqueued:
        """Send the job to ``queue`` (an ``rq.Queue``) unless its key has one pending."""

        def send(job_id: str, sent_kwargs: dict[str, Any]) -> Any:
            return queue.enqueue_call(
                self.name, args=args, kwargs=sent_kwargs, job_id=job_id, **self.options
            )

        return self.job.enqueue(args, kwargs, send)


def idempotent_job(
    guard: Guard | Callable[[], Guard], scope: str, *, key: KeySpec, **options: Any
) -> Callable[[Callable[..., Any]], RqJob]:
    """Make the decorated function an RQ job guarded per business key.

    ``key``: a template over the job's arguments or a callable taking them by name; mideng's
    options (``payload``, ``policy``, ``pending_for``, ``in_flight_delay``: see
    ``mideng.messaging.task_queue.JOB_OPTIONS``); the others go to ``Queue.enqueue_call``
    (``retry``, ``job_timeout``, ``result_ttl`` ...). ``guard`` is a Guard or a callable
    returning one (one per process).
    """
    require("rq", "rq")
    make = job_maker(guard, scope, key, options)
    return lambda fn: RqJob(make(fn), options)


def _will_retry(error: Exception) -> bool:
    """Whether RQ runs the failed job again: it retries on any error while retries are left."""
    import rq

    current = rq.get_current_job()
    return current is not None and bool(current.retries_left)
