"""The arq worker app of the storm: the guarded job and the worker's settings. A job's
in-progress mark lasts its timeout plus 10 s (arq's own), so a killed worker's job is taken by
the other worker about 13 s after the kill."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from arq.connections import RedisSettings

from mideng.messaging.arq import idempotent_job
from tests.messaging.task_queues import effects
from tests.services import REDIS_URL

QUEUE = os.environ.get("MIDENG_TQ_QUEUE", "mideng-tq-unset")


@idempotent_job(effects.guard, effects.SCOPE, key=effects.KEY, queue_name=QUEUE, timeout=3)
async def touch(key: str) -> str:
    import asyncio

    if await asyncio.to_thread(effects.started, key):
        await asyncio.sleep(60)  # the test SIGKILLs this process meanwhile
    return await asyncio.to_thread(effects.effect, key)


class WorkerSettings:
    functions: ClassVar[list[Any]] = [touch.function]
    queue_name = QUEUE
    redis_settings = RedisSettings.from_dsn(REDIS_URL)
    max_jobs = 1  # the killed worker has only the held job in hand (see the storm)
    poll_delay = 0.01
    handle_signals = True
