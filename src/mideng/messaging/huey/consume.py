"""Huey's side of a guarded job: one pending task per business key, one run per key.

    @idempotent_job(huey, guard, "stock", key="order:{order_id}", retries=3)
    def deduct_stock(order_id: str, quantity: int) -> dict[str, int]:
        ...

    deduct_stock.enqueue("1001", 2)     # Enqueued(key, task_id, Enqueue.QUEUED)
    deduct_stock.enqueue("1001", 2)     # nothing sent: Enqueue.PENDING, the first task's id

Huey's own locks have no expiry: a consumer killed while holding one leaves it held until
someone flushes it. Here the pending mark's lease (``pending_for``) ends, and it is freed as
soon as the task finishes for good (returned, replayed, or failed with no retry left). Huey
takes a task off its queue before running it and has no acknowledgement: a consumer killed
mid-task loses the task. Its key stays pending until ``pending_for`` runs out; an ``enqueue``
after that sends it again, and that run replays the first run's result or, when the first
never finished, takes the key over once its lease ran out and runs it
(mideng.messaging.task_queue has the rules). Retries (``retries=``) are delivered again and
replay as any copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mideng.core.keys import KeySpec
from mideng.guard.guard import Guard
from mideng.messaging.task_queue import Enqueued, GuardedJob, QueueJob, job_maker
from mideng.stores.registry import require


class HueyJob(QueueJob):
    """A guarded Huey task (``task``, Huey's TaskWrapper) and its ``enqueue``."""

    def __init__(self, job: GuardedJob, huey: Any, task: Any) -> None:
        super().__init__(job)
        self.huey = huey
        self.task = task

    def enqueue(self, *args: Any, **kwargs: Any) -> Enqueued:
        """Send the task to the Huey queue unless its key has one pending."""

        def send(job_id: str, sent_kwargs: dict[str, Any]) -> Any:
            task = self.task.task_class(args, sent_kwargs, id=job_id)
            return self.huey.enqueue(task)

        return self.job.enqueue(args, kwargs, send)


def idempotent_job(
    huey: Any, guard: Guard | Callable[[], Guard], scope: str, *, key: KeySpec, **options: Any
) -> Callable[[Callable[..., Any]], HueyJob]:
    """Make the decorated function a task of ``huey`` guarded per business key.

    ``key`` and mideng's options as in ``mideng.messaging.rq.idempotent_job``; the other
    options go to ``huey.task`` (``retries``, ``retry_delay``, ``name`` ...).
    """
    require("huey", "huey")
    make = job_maker(guard, scope, key, options)

    def decorate(fn: Callable[..., Any]) -> HueyJob:
        job = make(fn)

        def run(*args: Any, task: Any = None, **kwargs: Any) -> Any:
            # Huey retries on any error while the task has ``retries`` left (it lowers the
            # count as it enqueues the retry).
            return job.run(args, kwargs, lambda error: task is not None and bool(task.retries))

        run.__name__ = fn.__name__
        run.__qualname__ = fn.__qualname__
        run.__module__ = fn.__module__
        return HueyJob(job, huey, huey.task(context=True, **options)(run))

    return decorate
