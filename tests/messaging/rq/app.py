"""The RQ worker app of the storm: the guarded job, and a SimpleWorker (the job runs in the
worker's own process, so a SIGKILL of that process kills the job) whose abandoned jobs are
found in seconds: RQ's own heartbeat TTL adds 60 s, its maintenance runs every 10 min, and an
idle worker waits for a job up to its TTL less 15 s before it runs maintenance."""

from __future__ import annotations

import os

from rq import Queue, Retry, SimpleWorker

from mideng.messaging.rq import idempotent_job
from tests.messaging.task_queues import effects

QUEUE = os.environ.get("MIDENG_TQ_QUEUE", "mideng-tq-unset")


@idempotent_job(effects.guard, effects.SCOPE, key=effects.KEY, retry=Retry(max=3))
def touch(key: str) -> str:
    return effects.body(key)


@idempotent_job(effects.guard, effects.SCOPE, key="flaky:{key}", retry=Retry(max=1))
def flaky(key: str, fails: int, queue: str) -> str:
    again = Queue(queue, connection=effects.redis())
    return effects.flaky(key, fails, lambda: flaky.enqueue(again, key, fails, queue))


class QuickWorker(SimpleWorker):
    """Its started jobs count as abandoned 3 s after their last heartbeat."""

    def get_heartbeat_ttl(self, job: object, working_time: float = 0.0) -> int:
        return 3


def main() -> None:
    connection = effects.redis()
    worker = QuickWorker(
        [Queue(QUEUE, connection=connection)],
        connection=connection,
        maintenance_interval=1,
        worker_ttl=16,  # waits for a job 1 s at a time
    )
    worker.work(with_scheduler=False)
