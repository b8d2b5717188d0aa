"""arq's side of a guarded job: one pending job per business key, one run per key.

    @idempotent_job(guard, "stock", key="order:{order_id}", max_tries=3)
    async def deduct_stock(order_id: str, quantity: int) -> dict[str, int]:
        ...

    class WorkerSettings:
        functions = [deduct_stock.function]

    await deduct_stock.enqueue(redis, "1001", 2)    # Enqueued(key, job_id, Enqueue.QUEUED)
    await deduct_stock.enqueue(redis, "1001", 2)    # nothing sent: Enqueue.PENDING

arq's own ``_job_id`` holds a key until the job's *result* expires; here the key is held while
the job is pending or running and freed when it finishes (the scope's policy then decides
whether its run is kept). The job's arq id is minted fresh for each sent job. A worker killed
mid-job leaves the job in arq's queue; once its in-progress mark runs out another worker takes
it, and that delivery replays the first run's result or runs it (mideng.messaging.task_queue
has the rules). The body takes the business arguments only, not arq's ``ctx``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mideng.core.callables import is_async
from mideng.core.keys import KeySpec
from mideng.errors import ConfigurationError
from mideng.guard.guard import Guard
from mideng.messaging.task_queue import Enqueued, GuardedJob, QueueJob, job_maker
from mideng.stores.registry import require

#: arq's own default for a function without ``max_tries``.
ARQ_MAX_TRIES = 5


class ArqJob(QueueJob):
    """A guarded coroutine arq runs by name: ``function`` for ``WorkerSettings.functions``,
    sent with ``enqueue``."""

    def __init__(self, job: GuardedJob, options: dict[str, Any]) -> None:
        super().__init__(job)
        self.name: str = options.pop("name", None) or job.fn.__name__
        self.queue_name: str | None = options.pop("queue_name", None)
        self.max_tries: int = options.get("max_tries") or ARQ_MAX_TRIES
        self.options = options

    @property
    def function(self) -> Any:
        """The ``arq.worker.Function`` to list in ``WorkerSettings.functions``."""
        from arq.worker import func

        job, max_tries = self.job, self.max_tries

        async def delivery(ctx: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            tried = ctx.get("job_try", 1)
            return await job.arun(args, kwargs, lambda error: _will_retry(error, tried, max_tries))

        return func(delivery, name=self.name, **self.options)

    async def enqueue(self, redis: Any, *args: Any, **kwargs: Any) -> Enqueued:
        """Send the job through ``redis`` (an ``arq.ArqRedis``) unless its key has one pending.
        Keywords starting with ``_`` are arq's job options (``_queue_name``, ``_defer_by`` ...),
        as with ``enqueue_job``; the job id is mideng's."""
        options = {name: kwargs.pop(name) for name in list(kwargs) if name.startswith("_")}
        if "_job_id" in options:
            raise ConfigurationError(
                "_job_id is minted by mideng for each sent job; the business key dedupes"
            )
        if self.queue_name is not None:
            options.setdefault("_queue_name", self.queue_name)

        async def send(job_id: str, sent_kwargs: dict[str, Any]) -> Any:
            return await redis.enqueue_job(
                self.name, *args, _job_id=job_id, **options, **sent_kwargs
            )

        return await self.job.aenqueue(args, kwargs, send)


def idempotent_job(
    guard: Guard | Callable[[], Guard], scope: str, *, key: KeySpec, **options: Any
) -> Callable[[Callable[..., Any]], ArqJob]:
    """Make the decorated coroutine function an arq job guarded per business key.

    ``key`` and mideng's options as in ``mideng.messaging.rq.idempotent_job``; ``queue_name``
    is the queue ``enqueue`` sends to; the other options go to ``arq.worker.func`` (``name``,
    ``timeout``, ``max_tries`` ...).
    """
    require("arq", "arq")
    make = job_maker(guard, scope, key, options)

    def decorate(fn: Callable[..., Any]) -> ArqJob:
        if not is_async(fn):
            raise ConfigurationError(
                f"{getattr(fn, '__qualname__', fn)!r}: an arq job body is an async def"
            )
        return ArqJob(make(fn), dict(options))

    return decorate


def _will_retry(error: Exception, tried: int, max_tries: int) -> bool:
    """Whether arq runs the failed job again: only a job that raised ``arq.Retry``, and only
    while it has tries left; any other error fails it for good."""
    from arq.worker import Retry

    return isinstance(error, Retry) and tried < max_tries
