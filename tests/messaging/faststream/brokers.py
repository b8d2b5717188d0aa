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

    def dead_letter(self) -> tuple[str, dict[str, Any]]:
        """Where the middleware copies a dead letter, and its publish options."""
        raise NotImplementedError

    def subscribe_dead(self, router: Any) -> Callable[[Any], Any]:
        """A plain subscriber of the dead letters' destination."""
        raise NotImplementedError


class Rabbit(Case):
    name = "rabbit"
    handed_back = "SkipMessage"

    def __init__(self, names: BrokerNames) -> None:
        self.queue = names.rabbitmq_queue()
        self.dead = names.rabbitmq_queue("dead")
        self.ack_policy: AckPolicy | None = None  # FastStream's default unless set

    def broker(self) -> Any:
        from faststream.rabbit import RabbitBroker

        return RabbitBroker(AMQP_URL)

    def router(self, middlewares: Sequence[Any]) -> Any:
        from faststream.rabbit import RabbitRouter

        return RabbitRouter(middlewares=middlewares)

    def subscribe(self, router: Any) -> Callable[[Any], Any]:
        from faststream.rabbit import RabbitQueue

        policy = {} if self.ack_policy is None else {"ack_policy": self.ack_policy}
        queue = RabbitQueue(self.queue, durable=True)
        return router.subscriber(queue, **policy)  # type: ignore[no-any-return]

    async def publish(self, broker: Any, body: Any, headers: dict[str, str]) -> None:
        await broker.publish(body, self.queue, headers=headers)

    def dead_letter(self) -> tuple[str, dict[str, Any]]:
        return self.dead, {}

    def subscribe_dead(self, router: Any) -> Callable[[Any], Any]:
        from faststream.rabbit import RabbitQueue

        return router.subscriber(RabbitQueue(self.dead, durable=True))  # type: ignore[no-any-return]


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

    def dead_letter(self) -> tuple[str, dict[str, Any]]:
        # In the same stream (its subjects take ``subject.>``): published and acked by it.
        return f"{self.names.subject}.dead", {"stream": self.names.stream}

    def subscribe_dead(self, router: Any) -> Callable[[Any], Any]:
        from faststream.nats import JStream, PullSub

        stream = JStream(self.names.stream, subjects=[self.names.subject, self.names.wildcard])
        return router.subscriber(  # type: ignore[no-any-return]
            f"{self.names.subject}.dead",
            stream=stream,
            durable=f"{self.names.durable}-dead",
            pull_sub=PullSub(batch_size=1, timeout=0.2),
        )


class Kafka(Case):
    name = "kafka"

    def __init__(self, names: BrokerNames, server: KafkaBroker) -> None:
        self.names = names.kafka(server)
        self.dead = names.kafka(server, "dead")

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

    def dead_letter(self) -> tuple[str, dict[str, Any]]:
        return self.dead.topic, {}

    def subscribe_dead(self, router: Any) -> Callable[[Any], Any]:
        return router.subscriber(  # type: ignore[no-any-return]
            self.dead.topic,
            group_id=self.dead.group,
            auto_offset_reset="earliest",
            ack_policy=AckPolicy.ACK,
        )


class Redis(Case):
    name = "redis"

    def __init__(self, names: BrokerNames) -> None:
        self.names = names.redis_stream()
        self.consumers = 0

    def broker(self) -> Any:
        from faststream.redis import RedisBroker

        return RedisBroker(REDIS_URL)

    def router(self, middlewares: Sequence[Any]) -> Any:
        from faststream.redis import RedisRouter

        return RedisRouter(middlewares=middlewares)

    def subscribe(self, router: Any) -> Callable[[Any], Any]:
        from faststream.redis import StreamSub

        self.consumers += 1  # a member of the group per subscriber: c1, c2 ...
        sub = StreamSub(
            self.names.stream,
            group=self.names.group,
            consumer=f"c{self.consumers}",  # new entries: the group made at the stream's end
            max_records=1,  # one entry a read: a second member gets the next
        )
        return router.subscriber(stream=sub)  # type: ignore[no-any-return]

    async def publish(self, broker: Any, body: Any, headers: dict[str, str]) -> None:
        await broker.publish(body, stream=self.names.stream, headers=headers)

    def dead_letter(self) -> tuple[str, dict[str, Any]]:
        return self.names.dead, {}

    def subscribe_dead(self, router: Any) -> Callable[[Any], Any]:
        from faststream.redis import StreamSub

        sub = StreamSub(self.names.dead, group=f"{self.names.group}-dead", consumer="d1")
        return router.subscriber(stream=sub)  # type: ignore[no-any-return]
