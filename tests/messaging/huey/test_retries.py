"""Huey's retries and the key's mark, Huey's own consumer steps (dequeue, execute) run
in-process on Redis (tests/messaging/task_queues/retries.py)."""

from __future__ import annotations

from mideng.messaging.huey import idempotent_job
from mideng.messaging.task_queue import Enqueued
from tests.brokers import token
from tests.messaging.task_queues import effects
from tests.messaging.task_queues.retries import check_retries
from tests.services import REDIS_URL, need


def test_a_retried_task_keeps_its_mark_and_the_last_try_frees_it() -> None:
    need("redis")
    from huey import RedisHuey  # type: ignore[import-untyped]

    huey = RedisHuey(f"mideng-tq-retries-{token()}", url=REDIS_URL)

    @idempotent_job(huey, effects.guard, effects.SCOPE, key="flaky:{key}", retries=1)
    def flaky(key: str, fails: int) -> str:
        return effects.flaky(key, fails, lambda: flaky.enqueue(key, fails))

    def enqueue(key: str, fails: int) -> Enqueued:
        return flaky.enqueue(key, fails)

    def work() -> None:
        while (task := huey.dequeue()) is not None:
            huey.execute(task)

    try:
        check_retries(enqueue, work, tries_for_good=2)
    finally:
        huey.flush()
