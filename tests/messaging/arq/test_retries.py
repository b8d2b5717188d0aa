"""arq's retries and the key's mark, with an in-process burst Worker on Redis
(tests/messaging/task_queues/retries.py): arq tries a job again only when it raised
``arq.Retry``; any other error fails it for good, and frees the mark at once."""

from __future__ import annotations

import asyncio

import pytest

from mideng import Guard, open_store
from mideng.messaging.arq import idempotent_job
from mideng.messaging.task_queue import Enqueue, Enqueued
from tests.brokers import token
from tests.messaging.task_queues import effects
from tests.services import REDIS_URL, need


# arq (built for redis-py < 6) passes retry_on_timeout, which redis-py 6+ deprecates.
@pytest.mark.filterwarnings("ignore:.*retry_on_timeout:DeprecationWarning")
def test_a_retried_job_keeps_its_mark_and_any_other_error_frees_it() -> None:
    need("redis")
    from arq import Retry, Worker, create_pool
    from arq.connections import RedisSettings

    name = f"mideng-tq-retries-{token()}"
    # A Guard of this test's own: its async Redis connections belong to this test's loop.
    guard = Guard(open_store(REDIS_URL), lease=2.0)
    loop = asyncio.new_event_loop()
    pool = loop.run_until_complete(create_pool(RedisSettings.from_dsn(REDIS_URL)))

    @idempotent_job(guard, effects.SCOPE, key="flaky:{key}", queue_name=name, max_tries=3)
    async def flaky(key: str, fails: int) -> str:
        if fails < 0:
            raise RuntimeError("not an arq.Retry: arq gives up at once")
        # The first try raises arq's Retry; the retry notes whether the key's mark is still
        # held (an enqueue now would answer PENDING).
        if effects.tries(key) < fails:
            effects.redis().incr(f"{effects.PREFIX}:tries:{key}")
            raise Retry(defer=0)
        return await asyncio.to_thread(effects.flaky, key, 0, lambda: marked(key))

    def marked(key: str) -> Enqueued:
        mark = guard.store.get(f"{effects.SCOPE}#pending", f"flaky:{key}")
        state = Enqueue.QUEUED if mark is None else Enqueue.PENDING
        return Enqueued(f"flaky:{key}", None if mark is None else mark.owner, state)

    def enqueue_here(key: str, fails: int) -> Enqueued:
        return loop.run_until_complete(flaky.enqueue(pool, key, fails))

    async def burst() -> None:
        # Made inside the loop: arq's Worker takes the running loop as its own.
        worker = Worker(
            functions=[flaky.function],
            redis_pool=pool,
            burst=True,
            queue_name=name,
            poll_delay=0.05,
            handle_signals=False,
        )
        await worker.main()  # its health-check key expires by itself; the pool is closed below

    def work() -> None:
        loop.run_until_complete(burst())

    try:
        healed = f"healed-{token()}"
        assert enqueue_here(healed, 1).sent
        work()
        assert effects.seen(healed) == ["pending"]
        assert effects.effects_of(healed) == 1
        assert enqueue_here(healed, 1).state is Enqueue.DONE
        failed = f"failed-{token()}"
        assert enqueue_here(failed, -1).sent
        work()
        assert enqueue_here(failed, -1).state is Enqueue.QUEUED  # freed on the first error
    finally:
        loop.run_until_complete(pool.aclose())
        loop.run_until_complete(guard.aclose())
        loop.close()
