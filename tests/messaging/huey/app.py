"""The Huey storm job: a RedisHuey named after the test run. Huey has no acknowledgement, so a
job whose consumer is killed is lost; its key's pending mark lasts ``PENDING_FOR`` seconds,
after which the key may be enqueued again."""

from __future__ import annotations

from huey import RedisHuey  # type: ignore[import-untyped]

from mideng.messaging.huey import idempotent_job
from tests.messaging.task_queues import effects
from tests.services import REDIS_URL

# Outlasts the consumers' start and the kill of the job they hold (a few seconds), so the lost
# job's key is still pending when the test looks; the test then waits this long for it to lapse.
PENDING_FOR = 8.0

huey = RedisHuey(f"{effects.PREFIX}-huey", url=REDIS_URL)


@idempotent_job(huey, effects.guard, effects.SCOPE, key=effects.KEY, pending_for=PENDING_FOR)
def touch(key: str) -> str:
    return effects.body(key)
