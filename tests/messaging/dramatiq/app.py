"""The Dramatiq storm job, over a broker of each kind (app_rabbitmq.py, app_redis.py): its
queue is named after the test run, so other runs on the same servers never see it. A Redis
broker's dead worker is noticed once its heartbeat is 3 s old (Dramatiq's default: 60 s), and
its maintenance runs on every fetch (default: one in a thousand)."""

from __future__ import annotations

from typing import Any

from mideng.messaging.dramatiq import idempotent_actor
from mideng.messaging.dramatiq.consume import DramatiqJob
from tests.messaging.task_queues import effects
from tests.services import REDIS_URL


def queue(kind: str) -> str:
    return f"{effects.PREFIX}-dramatiq-{kind}"


def rabbitmq_broker() -> Any:
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    from tests.brokers import AMQP_URL

    return RabbitmqBroker(url=AMQP_URL)


def redis_broker() -> Any:
    from dramatiq.brokers.redis import RedisBroker

    return RedisBroker(  # type: ignore[no-untyped-call]
        url=REDIS_URL,
        namespace=queue("redis"),
        heartbeat_timeout=3000,
        maintenance_chance=1_000_000,
    )


def storm_job(broker: Any, kind: str) -> DramatiqJob:
    def touch(key: str) -> str:
        return effects.body(key)

    made: DramatiqJob = idempotent_actor(
        effects.guard, effects.SCOPE, key=effects.KEY, broker=broker, queue_name=queue(kind)
    )(touch)
    return made
