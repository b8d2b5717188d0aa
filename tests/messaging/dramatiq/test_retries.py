"""Dramatiq's Retries and the key's mark, with an in-process worker on a StubBroker
(tests/messaging/task_queues/retries.py); and an error the actor ``throws`` is never retried,
so it frees the mark at once."""

from __future__ import annotations

from mideng.messaging.dramatiq import idempotent_actor
from mideng.messaging.task_queue import Enqueue, Enqueued
from tests.brokers import token
from tests.messaging.task_queues import effects
from tests.messaging.task_queues.retries import check_retries
from tests.services import need


def test_a_retried_message_keeps_its_mark_and_the_last_try_frees_it() -> None:
    need("redis")
    from dramatiq import Worker
    from dramatiq.brokers.stub import StubBroker

    broker = StubBroker()
    name = f"mideng-tq-retries-{token()}"

    @idempotent_actor(
        effects.guard,
        effects.SCOPE,
        key="flaky:{key}",
        broker=broker,
        queue_name=name,
        max_retries=2,
        min_backoff=1,
        max_backoff=10,
        throws=(KeyError,),
    )
    def flaky(key: str, fails: int) -> str:
        if fails < 0:
            raise KeyError(key)  # thrown: Dramatiq gives up at once
        return effects.flaky(key, fails, lambda: flaky.enqueue(key, fails))

    def enqueue(key: str, fails: int) -> Enqueued:
        return flaky.enqueue(key, fails)

    worker = Worker(broker, worker_timeout=50)
    worker.start()

    def work() -> None:
        broker.join(name, fail_fast=False)
        worker.join()

    try:
        check_retries(enqueue, work, tries_for_good=3)
        thrown = f"thrown-{token()}"
        assert enqueue(thrown, -1).sent
        work()
        assert enqueue(thrown, -1).state is Enqueue.QUEUED
    finally:
        worker.stop()
        broker.close()
