"""Dramatiq's side of a guarded job: one pending message per business key, one run per key.

    @idempotent_actor(guard, "stock", key="order:{order_id}", broker=broker, max_retries=3)
    def deduct_stock(order_id: str, quantity: int) -> dict[str, int]:
        ...

    deduct_stock.enqueue("1001", 2)     # Enqueued(key, message_id, Enqueue.QUEUED)
    deduct_stock.enqueue("1001", 2)     # nothing sent: Enqueue.PENDING, the first message's id

Dramatiq itself sends every ``send`` as a new message. Here the key is held from ``enqueue``
until the message's run finishes for good (returned, replayed, or failed with no retry left),
and the message's id is the one mideng minted. A worker killed mid-message gives it back: on
RabbitMQ when its connection drops, on Redis once its heartbeat runs out and another worker's
maintenance requeues it; that delivery replays the first run's result or runs it
(mideng.messaging.task_queue has the rules). The actor's broker gets Dramatiq's
``CurrentMessage`` middleware, so a failed run can tell whether Dramatiq will retry it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mideng.core.keys import KeySpec
from mideng.guard.guard import Guard
from mideng.messaging.task_queue import Enqueued, GuardedJob, QueueJob, job_maker
from mideng.stores.registry import require


class DramatiqJob(QueueJob):
    """A guarded Dramatiq actor (``actor``) and its ``enqueue``."""

    def __init__(self, job: GuardedJob, actor: Any) -> None:
        super().__init__(job)
        self.actor = actor

    def enqueue(self, *args: Any, **kwargs: Any) -> Enqueued:
        """Send a message to the actor's queue unless its key has one pending."""

        def send(job_id: str, sent_kwargs: dict[str, Any]) -> Any:
            import dataclasses

            message = self.actor.message_with_options(args=args, kwargs=sent_kwargs)
            return self.actor.broker.enqueue(dataclasses.replace(message, message_id=job_id))

        return self.job.enqueue(args, kwargs, send)


def idempotent_actor(
    guard: Guard | Callable[[], Guard],
    scope: str,
    *,
    key: KeySpec,
    broker: Any = None,
    **options: Any,
) -> Callable[[Callable[..., Any]], DramatiqJob]:
    """Make the decorated function a Dramatiq actor guarded per business key.

    ``key`` and mideng's options as in ``mideng.messaging.rq.idempotent_job``; ``broker``: the
    actor's broker (Dramatiq's global one when None); the other options go to
    ``dramatiq.actor`` (``actor_name``, ``queue_name``, ``max_retries``, ``time_limit`` ...).
    """
    dramatiq = require("dramatiq", "dramatiq")
    make = job_maker(guard, scope, key, options)
    from dramatiq.middleware import CurrentMessage

    chosen = broker if broker is not None else dramatiq.get_broker()
    if not any(isinstance(m, CurrentMessage) for m in chosen.middleware):
        chosen.add_middleware(CurrentMessage())

    def decorate(fn: Callable[..., Any]) -> DramatiqJob:
        job = make(fn)

        def run(*args: Any, **kwargs: Any) -> Any:
            return job.run(args, kwargs, lambda error: _will_retry(chosen, actor, error))

        run.__name__ = fn.__name__
        run.__qualname__ = fn.__qualname__
        run.__module__ = fn.__module__
        actor = dramatiq.actor(run, broker=chosen, **options)
        return DramatiqJob(job, actor)

    return decorate


def _will_retry(broker: Any, actor: Any, error: Exception) -> bool:
    """Whether Dramatiq's Retries middleware sends the failed message again, by its own rule:
    never for an error the actor ``throws``; else ``retry_when`` when set; else while it was
    retried fewer times than ``max_retries``."""
    from dramatiq.middleware import CurrentMessage, Retries

    message = CurrentMessage.get_current_message()
    retries = next((m for m in broker.middleware if isinstance(m, Retries)), None)
    if message is None or retries is None:
        return False
    options, own = message.options, actor.options
    throws = options.get("throws") or own.get("throws")
    if throws and isinstance(error, throws):
        return False
    done = options.get("retries", 0)
    retry_when = own.get("retry_when", retries.retry_when)
    if retry_when is not None:
        return bool(retry_when(done, error))
    limit = options.get("max_retries", own.get("max_retries", retries.max_retries))
    return limit is None or done < limit
