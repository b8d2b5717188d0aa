"""The RabbitMQ adapter acks a batch with one ``multiple`` ack where that is exact, and never
covers a delivery a Retry holds for its delay: unit cases on the settler's frames, then the
same on a real broker, where a covered retry would be acked instead of run again."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import aio_pika
import pytest

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message
from mideng.messaging.verdict import Ack, DeadLetter, Retry, Verdict
from mideng.stores.memory import MemoryStore
from tests.brokers import AMQP_URL, BrokerNames
from tests.messaging.rabbitmq.broker import publish, ready
from tests.messaging.running import consume_until

rabbitmq = importlib.import_module("mideng.messaging.rabbitmq.consume")

ACK = Ack(True)


def retry(delay: float) -> Retry:
    return Retry(delay, "in flight elsewhere")


class Delivery:
    """What the settler uses of an aio-pika IncomingMessage, recording each frame sent."""

    def __init__(self, tag: int, frames: list[tuple[str, int, bool]], gate: asyncio.Event):
        self.delivery_tag = tag
        self.frames, self.gate = frames, gate
        self.fail: list[bool] = []  # one entry: the next reject raises

    async def ack(self, multiple: bool = False) -> None:
        self.frames.append(("ack", self.delivery_tag, multiple))

    async def reject(self, requeue: bool = False) -> None:
        await self.gate.wait()  # a requeue still on its way to the broker until opened
        if self.fail:
            self.fail.pop()
            raise ConnectionError("connection reset by peer")
        self.frames.append(("reject", self.delivery_tag, requeue))


class Batch:
    def __init__(self) -> None:
        self.frames: list[tuple[str, int, bool]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.settler = rabbitmq._Settler(channel=None, dead_letter_queue=None)

    async def settle(self, *pairs: tuple[int, Verdict]) -> list[tuple[str, int, bool]]:
        self.frames.clear()
        messages = [
            Message(b"", {}, None, None, Delivery(tag, self.frames, self.gate)) for tag, _v in pairs
        ]
        await self.settler.settle(messages, [v for _t, v in pairs])
        return list(self.frames)


def run(body: Any) -> None:
    asyncio.run(body())


def test_a_batch_of_acks_is_one_multiple_ack_and_a_single_one_a_plain_ack() -> None:
    async def body() -> None:
        b = Batch()
        assert await b.settle((1, ACK), (2, ACK), (3, ACK)) == [("ack", 3, True)]
        assert await b.settle((4, ACK)) == [("ack", 4, False)]

    run(body)


def test_acks_above_a_retry_held_in_the_same_batch_go_one_by_one() -> None:
    async def body() -> None:
        b = Batch()
        frames = await b.settle((1, ACK), (2, ACK), (3, retry(30)), (4, ACK), (5, ACK))
        assert frames == [("ack", 2, True), ("ack", 4, False), ("ack", 5, False)]
        await b.settler.give_back()
        assert b.frames[-1] == ("reject", 3, True)

    run(body)


def test_a_retry_held_from_an_earlier_batch_is_never_covered() -> None:
    async def body() -> None:
        b = Batch()
        assert await b.settle((1, retry(0.05)), (2, ACK)) == [("ack", 2, False)]
        assert await b.settle((3, ACK), (4, ACK)) == [("ack", 3, False), ("ack", 4, False)]
        await asyncio.sleep(0.2)  # the delay passes: requeued
        assert ("reject", 1, True) in b.frames
        assert await b.settle((5, ACK), (6, ACK)) == [("ack", 6, True)]

    run(body)


def test_a_retry_whose_requeue_is_still_being_sent_is_not_covered() -> None:
    async def body() -> None:
        b = Batch()
        b.gate.clear()  # requeues wait on the way out
        await b.settle((1, retry(0.01)), (2, ACK))
        await asyncio.sleep(0.1)  # the timer has fired; its reject is not sent yet
        assert not b.settler.waiting
        assert await b.settle((3, ACK), (4, ACK)) == [("ack", 3, False), ("ack", 4, False)]
        b.gate.set()
        await asyncio.sleep(0.05)
        assert b.frames[-1] == ("reject", 1, True)
        assert await b.settle((5, ACK), (6, ACK)) == [("ack", 6, True)]

    run(body)


def test_a_retry_whose_requeue_failed_stays_held_and_is_never_covered() -> None:
    async def body() -> None:
        b = Batch()
        delivery = Delivery(1, b.frames, b.gate)
        delivery.fail.append(True)
        await b.settler.settle([Message(b"", {}, None, None, delivery)], [retry(0.01)])
        await asyncio.sleep(0.1)  # the timer fired and its reject raised
        assert ("reject", 1, True) not in b.frames
        assert await b.settle((2, ACK), (3, ACK)) == [("ack", 2, False), ("ack", 3, False)]

    run(body)


def test_a_dead_letter_is_settled_first_and_the_acks_still_go_as_one() -> None:
    async def body() -> None:
        b = Batch()
        frames = await b.settle((1, ACK), (2, DeadLetter("bad")), (3, ACK))
        assert frames == [("reject", 2, False), ("ack", 3, True)]

    run(body)


def test_on_a_broker_retries_inside_big_batches_run_again_and_the_rest_is_acked_in_few_frames(
    broker_names: BrokerNames, monkeypatch: pytest.MonkeyPatch
) -> None:
    """60 messages in a prefetch of 60, every seventh failing once: had a multiple ack covered
    a held retry, the broker would have taken it as acked (never run again) and the later
    requeue of an unknown tag would have closed the channel."""
    queue = broker_names.rabbitmq_queue()
    keys = [f"order:{n}" for n in range(60)]
    flaky = set(keys[3::7])
    runs: dict[str, int] = {}
    real = aio_pika.IncomingMessage.ack
    acks: list[bool] = []

    async def counted(self: Any, multiple: bool = False) -> None:
        acks.append(multiple)
        await real(self, multiple)

    monkeypatch.setattr(aio_pika.IncomingMessage, "ack", counted)

    def handler(message: Message) -> None:
        key = message.headers["idempotency-key"]
        runs[key] = runs.get(key, 0) + 1
        if key in flaky and runs[key] == 1:
            raise TimeoutError("inventory service timed out")

    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", handler, retry_delay=0.2)

    async def scenario() -> None:
        await publish(queue, *keys)

        async def done() -> bool:
            return sum(runs.values()) == len(keys) + len(flaky) and await ready(queue) == 0

        await consume_until(
            lambda stop: rabbitmq.consume(consumer, AMQP_URL, queue=queue, stop=stop, prefetch=60),
            done,
        )
        assert await ready(queue) == 0  # closing the connection requeued nothing unacked

    asyncio.run(scenario())
    assert runs == {k: 2 if k in flaky else 1 for k in keys}
    assert any(acks), "no batch was acked with one multiple ack"
    assert len(acks) < len(keys)  # fewer frames than the 60 deliveries acked


def test_a_failed_multiple_ack_loses_nothing_and_reruns_nothing(
    broker_names: BrokerNames, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one frame acking a batch fails once (the connection drops with it): the broker
    requeues the whole batch, and each message comes back to be acked unrun."""
    queue = broker_names.rabbitmq_queue()
    keys = [f"order:{n}" for n in range(20)]
    runs: dict[str, int] = {}
    real = aio_pika.IncomingMessage.ack
    failed: list[bool] = []

    async def flaky(self: Any, multiple: bool = False) -> None:
        if multiple and not failed:
            failed.append(True)
            raise ConnectionError("connection reset by peer")
        await real(self, multiple)

    monkeypatch.setattr(aio_pika.IncomingMessage, "ack", flaky)

    def handler(message: Message) -> None:
        key = message.headers["idempotency-key"]
        runs[key] = runs.get(key, 0) + 1

    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", handler)

    async def scenario() -> None:
        await publish(queue, *keys)

        async def done() -> bool:
            return bool(failed) and len(runs) == len(keys) and await ready(queue) == 0

        await consume_until(
            lambda stop: rabbitmq.consume(consumer, AMQP_URL, queue=queue, stop=stop, prefetch=20),
            done,
        )
        assert await ready(queue) == 0

    asyncio.run(scenario())
    assert failed
    assert runs == dict.fromkeys(keys, 1)
