"""arq with real workers: the kill storm (tests/messaging/task_queues/storm.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mideng.messaging.task_queue import Enqueue, Enqueued
from tests.messaging.task_queues import storm
from tests.services import REDIS_URL, need


# arq (built for redis-py < 6) passes retry_on_timeout, which redis-py 6+ deprecates.
@pytest.mark.filterwarnings("ignore:.*retry_on_timeout:DeprecationWarning")
def test_a_sigkilled_worker_leaves_every_key_run_once(tmp_path: Path) -> None:
    need("redis")
    from arq import create_pool
    from arq.connections import RedisSettings

    from tests.messaging.arq.app import touch

    with storm.storm(tmp_path) as made:
        queue_name = f"{made.prefix}-{made.run}-arq"
        loop = asyncio.new_event_loop()
        pool = loop.run_until_complete(create_pool(RedisSettings.from_dsn(REDIS_URL)))

        def enqueue(key: str) -> Enqueued:
            return loop.run_until_complete(touch.enqueue(pool, key, _queue_name=queue_name))

        try:
            storm.enqueue_all(made, enqueue)
            run = made.python(
                "from arq.worker import run_worker; "
                "from tests.messaging.arq.app import WorkerSettings; run_worker(WorkerSettings)"
            )
            made.start(run, "a", hold_at=20, MIDENG_TQ_QUEUE=queue_name)
            made.start(run, "b", hold_at=0, MIDENG_TQ_QUEUE=queue_name)
            held = made.kill_the_holder()
            storm.check_exactly_once(made, held)
            assert {enqueue(key).state for key in made.key_names()} == {Enqueue.DONE}
        finally:
            loop.run_until_complete(pool.aclose())
            loop.close()
