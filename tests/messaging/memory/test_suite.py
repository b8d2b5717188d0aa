"""The in-process broker (``memory://``) through the base suite (tests/messaging/base).

Two kinds of scenario have nothing to stand on in one process: a connection dropped (there
is none: publisher, broker and consumer share the process's memory), and consumer processes
SIGKILLed mid-storm (a killed process takes the broker with it). What a dropped connection
leaves behind, deliveries held and not settled, is what a cancelled consume leaves, and the
base suite's cancellation cases show those delivered again and answered without running."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from mideng import Guard
from mideng.errors import ConfigurationError
from mideng.messaging import IdempotentConsumer, Message
from mideng.messaging.headers import IDEMPOTENCY_KEY
from mideng.messaging.publish import open_publisher, outgoing
from mideng.stores.memory import MemoryStore
from tests.messaging.base import BrokerSuite
from tests.messaging.base.broker import Broker, key
from tests.messaging.memory.broker import InProcess
from tests.messaging.running import consume_until

NO_CONNECTION = "an in-process broker has no connection to drop"
ONE_PROCESS = "an in-process broker lives in one process; the storm kills consumer processes"

SENT = {"trace": "span-1", "note": "caf\xe9", "x/route": "eu-1"}


class TestMemory(BrokerSuite):
    sent_headers = SENT

    @pytest.fixture
    def broker(self) -> InProcess:
        return InProcess()

    def copied_headers(self, reason: str, sent: list[str]) -> object:
        return {**SENT, "x-dead-letter-reason": reason}

    @pytest.mark.skip(reason=NO_CONNECTION)
    def test_a_connection_dropped_while_waiting_for_deliveries_is_reconnected(
        self, broker: Broker, caplog: pytest.LogCaptureFixture
    ) -> None:
        pass

    @pytest.mark.skip(reason=NO_CONNECTION)
    def test_a_connection_dropped_after_the_handlers_before_the_acks_reruns_nothing(
        self, broker: Broker, caplog: pytest.LogCaptureFixture
    ) -> None:
        pass

    @pytest.mark.skip(reason=ONE_PROCESS)
    def test_storm_one_effect_per_key_with_kills(
        self, broker: Broker, tmp_path: Path, storm_database: str
    ) -> None:
        pass

    @pytest.mark.skip(reason=ONE_PROCESS)
    def test_killed_at_a_crash_point(self, broker: Broker, tmp_path: Path, at: str) -> None:
        pass

    @pytest.mark.skip(reason=ONE_PROCESS)
    def test_killed_between_two_remote_steps_the_redelivery_resumes(
        self, broker: Broker, tmp_path: Path
    ) -> None:
        pass


def test_the_relay_s_publisher_reaches_a_consumer_in_another_thread_and_loop() -> None:
    """open_publisher("memory://…") and consume on the same name share one broker, across
    event loops; a message published twice (a lost confirm) is delivered twice and run once."""
    broker = InProcess()
    runs: Counter[str] = Counter()

    async def publish_twice() -> None:
        publisher = open_publisher(broker.url)
        await publisher.start()
        for _ in range(2):
            await publisher.publish(outgoing(broker.queue, b"{}", key="order:1"))
        await publisher.close()

    asyncio.run(publish_twice())  # a loop of its own, gone before the consumer's starts
    [first, second] = broker.held.waiting(broker.queue)
    assert first.message_id == second.message_id == "order:1"

    async def done() -> bool:
        return await broker.asettled()

    seen: list[Message] = []

    def handler(message: Message) -> None:
        seen.append(message)
        runs.update([key(message)])

    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", handler)
    asyncio.run(consume_until(lambda stop: broker.consume(consumer, stop, batch=1), done))
    assert runs == Counter({"order:1": 1})
    assert [m.id for m in seen] == ["order:1"]


def test_a_redelivery_counts_its_attempts() -> None:
    """A message a consume left unsettled (cancelled mid-handler) is taken again: attempt 2."""
    side = InProcess()
    side.publish([("order:9", b"{}")])
    attempts: list[int | None] = []
    entered = asyncio.Event()

    async def handler(message: Message) -> None:
        attempts.append(message.attempt)
        if len(attempts) == 1:
            entered.set()
            await asyncio.Event().wait()  # held until cancelled

    consumer = IdempotentConsumer(Guard(MemoryStore(), lease=0.2), "stock", handler)

    async def scenario() -> None:
        task = asyncio.ensure_future(side.consume(consumer, asyncio.Event()))
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert side.unsettled() == 1  # back on the queue

        async def done() -> bool:
            return len(attempts) == 2 and await side.asettled()

        await consume_until(lambda stop: side.consume(consumer, stop), done)

    asyncio.run(scenario())
    assert attempts == [1, 2]


@pytest.mark.parametrize("url", ["memory://a/b", "memory://x?y=1", "amqp://x"])
def test_a_url_that_names_no_in_process_broker_is_refused(url: str) -> None:
    from mideng.messaging.memory.publish import MemoryPublisher

    with pytest.raises(ConfigurationError):
        MemoryPublisher(url)


def test_the_outbox_relay_publishes_to_it(tmp_path: Path) -> None:
    """A Relay opened on a memory:// URL publishes what committed, with the row's message id
    and key; a consumer of that queue runs it once."""
    from sqlalchemy import create_engine

    from mideng.outbox import Outbox, Relay

    db = f"sqlite:///{tmp_path / 'shop.db'}"
    engine = create_engine(db)
    outbox = Outbox(engine)
    outbox.create_schema()
    with engine.begin() as conn:
        sent = outbox.add(conn, "orders.paid", {"order": 1001}, key="order:1001")
    broker = InProcess()

    async def relay() -> int:
        async with Relay(db, broker.url) as running:
            return (await running.run_once()).sent

    try:
        assert asyncio.run(relay()) == 1
    finally:
        engine.dispose()
    [delivery] = broker.held.waiting("orders.paid")
    assert delivery.message_id == sent
    assert delivery.headers[IDEMPOTENCY_KEY] == "order:1001"
