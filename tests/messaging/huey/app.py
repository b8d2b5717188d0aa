"""The Huey storm job: a RedisHuey named after the test run. Huey has no acknowledgement, so a
job whose consumer is killed is lost; its key's pending mark lasts ``PENDING_FOR`` seconds,
after which the key may be enqueued again."""

from __future__ import annotations

from huey import RedisHuey  # type: ignore[import-untyped]

from mideng.messaging.huey import idempotent_job
from tests.messaging.task_queues import effects
from tests.services import REDIS_URL

PENDING_FOR = 15.0

huey = RedisHuey(f"{effects.PREFIX}-huey", url=REDIS_URL)


@idempotent_job(huey, effects.guard, effects.SCOPE, key=effects.KEY, pending_for=PENDING_FOR)
def touch(key: str) -> str:
    return effects.body(key)
