"""The four FastStream brokers under test, each on fresh names (tests/brokers.py): the broker,
a router carrying the middlewares, the subscriber's arguments, and how a test publishes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from faststream import AckPolicy

from tests.brokers import AMQP_URL, NATS_URL, BrokerNames, KafkaBroker
from tests.services import REDIS_URL


class Case:
    """One broker: ``subscribe(router)`` registers a handler on the test's names."""

    name = ""
    #: How a Retry leaves the middleware: the broker takes the message back (RabbitMQ holds it
    #: and requeues it later: "SkipMessage"; JetStream naks it with the delay: "NackMessage"),
    #: or None: it runs again in place.
    handed_back: str | None = None

    def broker(self) -> Any:
        raise NotImplementedError

    def router(self, middlewares: Sequence[Any]) -> Any:
        raise NotImplementedError

    def subscribe(self, router: Any) -> Callable[[Any], Any]:
        raise NotImplementedError

    async def publish(self, broker: Any, body: Any, headers: dict[str, str]) -> None:
        raise NotImplementedError


class Rabbit(Case):
    name = "rabbit"
    handed_back = "SkipMessage"

    def __init__(self, names: BrokerNames) -> None:
        self.queue = names.rabbitmq_queue()
        self.dead = names.rabbitmq_queue("dead")

    def broker(self) -> Any:
        from faststream.rabbit import RabbitBroker

        return RabbitBroker(AMQP_URL)

    def router(self, middlewares: Sequence[Any]) -> Any:
        from faststream.rabbit import RabbitRouter

        return RabbitRouter(middlewares=middlewares)

    def subscribe(self, router: Any) -> Callable[[Any], Any]:
        from faststream.rabbit import RabbitQueue

        return router.subscriber(RabbitQueue(self.queue, durable=True))  # type: ignore[no-any-return]

    async def publish(self, broker: Any, body: Any, headers: dict[str, str]) -> None:
        await broker.publish(body, self.queue, headers=headers)


class Nats(Case):
    name = "nats"
    handed_back = "NackMessage"

    def __init__(self, names: BrokerNames) -> None:
        self.names = names.nats()

    def broker(self) -> Any:
        from faststream.nats import NatsBroker

        return NatsBroker(NATS_URL)

    def router(self, middlewares: Sequence[Any]) -> Any:
        from faststream.nats import NatsRouter

        return NatsRouter(middlewares=middlewares)

    def subscribe(self, router: Any) -> Callable[[Any], Any]:
        from faststream.nats import JStream, PullSub

        stream = JStream(self.names.stream, subjects=[self.names.subject, self.names.wildcard])
        return router.subscriber(  # type: ignore[no-any-return]
            self.names.subject,
            stream=stream,
            durable=self.names.durable,
            pull_sub=PullSub(batch_size=1, timeout=0.2),
        )

    async def publish(self, broker: Any, body: Any, headers: dict[str, str]) -> None:
        await broker.publish(body, self.names.subject, headers=headers, stream=self.names.stream)


class Kafka(Case):
    name = "kafka"

    def __init__(self, names: BrokerNames, server: KafkaBroker) -> None:
        self.names = names.kafka(server)

    def broker(self) -> Any:
        from faststream.kafka import KafkaBroker as FastKafka

        return FastKafka(self.names.bootstrap)

    def router(self, middlewares: Sequence[Any]) -> Any:
        from faststream.kafka import KafkaRouter

        return KafkaRouter(middlewares=middlewares)

    def subscribe(self, router: Any) -> Callable[[Any], Any]:
        return router.subscriber(  # type: ignore[no-any-return]
            self.names.topic,
            group_id=self.names.group,
            auto_offset_reset="earliest",
            ack_policy=AckPolicy.ACK,  # commit after the handler, never before it
        )

    async def publish(self, broker: Any, body: Any, headers: dict[str, str]) -> None:
        await broker.publish(body, self.names.topic, headers=headers)


class Redis(Case):
    name = "redis"

    def __init__(self, names: BrokerNames) -> None:
        self.names = names.redis_stream()

    def broker(self) -> Any:
        from faststream.redis import RedisBroker

        return RedisBroker(REDIS_URL)

    def router(self, middlewares: Sequence[Any]) -> Any:
        from faststream.redis import RedisRouter

        return RedisRouter(middlewares=middlewares)

    def subscribe(self, router: Any) -> Callable[[Any], Any]:
        from faststream.redis import StreamSub

        sub = StreamSub(self.names.stream, group=self.names.group, consumer="c1", last_id="0")
        return router.subscriber(stream=sub)  # type: ignore[no-any-return]

    async def publish(self, broker: Any, body: Any, headers: dict[str, str]) -> None:
        await broker.publish(body, stream=self.names.stream, headers=headers)
