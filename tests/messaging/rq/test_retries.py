"""RQ's retries and the key's mark, with an in-process SimpleWorker on Redis
(tests/messaging/task_queues/retries.py)."""

from __future__ import annotations

from mideng.messaging.task_queue import Enqueued
from tests.brokers import token
from tests.messaging.task_queues.retries import check_retries
from tests.services import need


def test_a_retried_job_keeps_its_mark_and_the_last_try_frees_it() -> None:
    need("redis")
    from rq import Queue, SimpleWorker

    from tests.messaging.rq.app import flaky
    from tests.messaging.task_queues import effects

    name = f"mideng-tq-retries-{token()}"
    queue = Queue(name, connection=effects.redis())

    def enqueue(key: str, fails: int) -> Enqueued:
        return flaky.enqueue(queue, key, fails, name)

    def work() -> None:
        SimpleWorker([queue], connection=effects.redis()).work(burst=True)

    try:
        check_retries(enqueue, work, tries_for_good=2)
    finally:
        queue.delete(delete_jobs=True)
