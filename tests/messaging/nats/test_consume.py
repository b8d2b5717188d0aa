"""The JetStream adapter against the real server: a poison message is tried N times, copied to
the dead subject and terminated while the consumer goes on; an existing durable is bound as
it is; a handler longer than ack_wait is kept in progress (never redelivered meanwhile); stop
finishes the batch in hand; a bare asyncio.TimeoutError from fetch is a quiet poll; the
message's id and attempt come from the broker."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from mideng import Guard
from mideng.errors import ConfigurationError
from mideng.messaging import IdempotentConsumer, Message, Verdict
from mideng.messaging import nats as adapter
from mideng.messaging.reconnect import Backoff
from mideng.stores.memory import MemoryStore
from tests.helpers.storm import headers_of
from tests.messaging.nats.conftest import NatsSide

pytestmark = pytest.mark.slow


class Seen:
    """The consumer, recording every message handed to it."""

    def __init__(self, inner: IdempotentConsumer) -> None:
        self.inner = inner
        self.messages: list[Message] = []

    async def handle(self, message: Message) -> Verdict:
        self.messages.append(message)
        return await self.inner.handle(message)

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        self.messages.extend(messages)
        return await self.inner.handle_batch(messages)


async def until(condition: Any, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def consuming(consumer: Any, side: NatsSide, stop: asyncio.Event, **extra: Any) -> None:
    options = {**side.adapter(), **extra}
    await adapter.consume(consumer, side.url, stop=stop, **options)


async def dead_copies(side: NatsSide, subject: str) -> list[Any]:
    import nats

    client = await nats.connect(side.url)
    try:
        jetstream = client.jetstream()
        sub = await jetstream.pull_subscribe(subject, stream=side.names.stream)
        try:
            return list(await sub.fetch(10, timeout=2))
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            return []
    finally:
        await client.close()


def test_poison_is_tried_n_times_then_dead_lettered_and_the_rest_go_on(
    nats_side: NatsSide,
) -> None:
    tries: list[str] = []

    def handler(message: Message) -> None:
        tries.append(message.headers["idempotency-key"])
        if message.headers["idempotency-key"] == "order:poison":
            raise ValueError("stock row is locked forever")

    guard = Guard(MemoryStore(), lease=5)
    consumer = IdempotentConsumer(guard, "stock", handler, max_attempts=3, retry_delay=0.05)
    dead = f"{nats_side.names.subject}.dead"
    nats_side.publish([("order:poison", b"{}")] + [(f"order:{n}", b"{}") for n in range(5)])

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(consuming(consumer, nats_side, stop, dead_subject=dead))
        await until(lambda: tries.count("order:poison") == 3 and len(set(tries)) == 6)
        # Published after the poison was given up on: the consumer is still going.
        await asyncio.to_thread(nats_side.publish, [("order:late", b"{}")])
        await until(lambda: "order:late" in tries)
        await asyncio.to_thread(lambda: until_settled(nats_side))
        stop.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    assert tries.count("order:poison") == 3
    assert sorted(k for k in tries if k != "order:poison") == sorted(
        [f"order:{n}" for n in range(5)] + ["order:late"]
    )
    copies = asyncio.run(dead_copies(nats_side, dead))
    assert [c.headers["idempotency-key"] for c in copies] == ["order:poison"]
    assert "failed 3 time(s)" in copies[0].headers[adapter.DEAD_LETTER_REASON]


def until_settled(side: NatsSide, timeout: float = 20.0) -> None:
    from tests.helpers.storm import wait_for

    wait_for(side.settled, timeout, "nothing pending or unacked")


def test_an_existing_durable_is_bound_as_it_is(nats_side: NatsSide) -> None:
    async def scenario() -> Any:
        import nats
        from nats.js.api import AckPolicy, ConsumerConfig

        client = await nats.connect(nats_side.url)
        js = client.jetstream()
        await js.add_consumer(
            nats_side.names.stream,
            ConsumerConfig(
                durable_name=nats_side.names.durable,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=7,
                filter_subject=nats_side.names.subject,
            ),
        )
        runs: list[str] = []
        consumer = IdempotentConsumer(
            Guard(MemoryStore()), "stock", lambda m: runs.append(m.headers["idempotency-key"])
        )
        stop = asyncio.Event()
        task = asyncio.create_task(consuming(consumer, nats_side, stop, ack_wait=30))
        await asyncio.to_thread(nats_side.publish, [("order:1", b"{}")])
        await until(lambda: runs == ["order:1"])
        stop.set()
        await asyncio.wait_for(task, 10)
        info = await js.consumer_info(nats_side.names.stream, nats_side.names.durable)
        await client.close()
        return info

    info = asyncio.run(scenario())
    assert info.config.ack_wait == 7  # not the 30 asked for a durable it would create


def test_a_durable_filtering_another_subject_or_a_missing_stream_is_refused(
    nats_side: NatsSide,
) -> None:
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", lambda m: None)

    async def scenario(**overrides: Any) -> None:
        options = {**nats_side.adapter(), **overrides}
        await adapter.consume(consumer, nats_side.url, stop=asyncio.Event(), **options)

    with pytest.raises(ConfigurationError, match="does not exist"):
        asyncio.run(scenario(stream=f"{nats_side.names.stream}_MISSING"))
    stop_at_once = asyncio.Event()
    stop_at_once.set()
    asyncio.run(
        adapter.consume(consumer, nats_side.url, stop=stop_at_once, **nats_side.adapter())
    )  # creates the durable on the stream's subject
    with pytest.raises(ConfigurationError, match="filters"):
        asyncio.run(scenario(subject=f"{nats_side.names.subject}.other"))
    with pytest.raises(ConfigurationError, match="batch"):
        asyncio.run(scenario(batch=0))


def test_a_handler_longer_than_ack_wait_is_kept_in_progress(nats_side: NatsSide) -> None:
    async def handler(message: Message) -> None:
        await asyncio.sleep(3.0)  # three times the durable's ack_wait

    seen = Seen(IdempotentConsumer(Guard(MemoryStore(), lease=10), "stock", handler))
    other = Seen(IdempotentConsumer(Guard(MemoryStore(), lease=10), "stock", handler))
    nats_side.publish([("order:slow", b"{}")])

    async def scenario() -> None:
        stop = asyncio.Event()
        first = asyncio.create_task(consuming(seen, nats_side, stop, ack_wait=1.0, batch=1))
        await until(lambda: len(seen.messages) == 1)
        # A second consumer on the durable would be handed the message if its clock ran out.
        second = asyncio.create_task(consuming(other, nats_side, stop, ack_wait=1.0, batch=1))
        await asyncio.to_thread(lambda: until_settled(nats_side, 15))
        stop.set()
        await asyncio.wait_for(asyncio.gather(first, second), 10)

    asyncio.run(scenario())
    assert [m.attempt for m in seen.messages] == [1]
    assert other.messages == []
    assert nats_side.info().num_redelivered == 0


def test_stop_finishes_the_message_in_hand_and_returns(nats_side: NatsSide) -> None:
    started = asyncio.Event()
    finished: list[str] = []

    async def handler(message: Message) -> None:
        started.set()
        await asyncio.sleep(0.5)
        finished.append(message.headers["idempotency-key"])

    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", handler)
    nats_side.publish([("order:1", b"{}")])

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(consuming(consumer, nats_side, stop))
        await asyncio.wait_for(started.wait(), 20)
        stop.set()  # mid-handler
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    assert finished == ["order:1"]
    info = nats_side.info()
    assert (info.num_pending, info.num_ack_pending) == (0, 0)  # acked before returning


def _fetch_failing(monkeypatch: pytest.MonkeyPatch, error: BaseException, times: int) -> list[int]:
    from nats.js.client import JetStreamContext

    real = JetStreamContext.PullSubscription.fetch
    raised: list[int] = []

    async def flaky(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(raised) < times:
            raised.append(1)
            raise error
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(JetStreamContext.PullSubscription, "fetch", flaky)
    return raised


@pytest.mark.parametrize("error", ["bare timeout", "service unavailable", "no responders"])
def test_a_fetch_that_times_out_or_fails_once_is_tried_again(
    nats_side: NatsSide, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    from nats.errors import NoRespondersError
    from nats.js.errors import ServiceUnavailableError

    raising = {
        "bare timeout": asyncio.TimeoutError(),
        "service unavailable": ServiceUnavailableError(),
        "no responders": NoRespondersError(),
    }[error]
    raised = _fetch_failing(monkeypatch, raising, 2)
    runs: list[Message] = []
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", runs.append)
    nats_side.publish([("order:1", b"{}")])

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(consuming(consumer, nats_side, stop))
        await until(lambda: len(runs) == 1)
        stop.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    assert len(raised) == 2
    assert runs[0].attempt == 1


def test_a_connection_closed_for_good_is_replaced_by_a_new_client(
    nats_side: NatsSide, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nats.errors import ConnectionClosedError

    raised = _fetch_failing(monkeypatch, ConnectionClosedError(), 1)
    runs: list[Message] = []
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", runs.append)
    nats_side.publish([("order:1", b"{}")])

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(
            consuming(consumer, nats_side, stop, reconnect=Backoff(0.01, 0.05))
        )
        await until(lambda: len(runs) == 1)
        stop.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    assert len(raised) == 1
    assert len(runs) == 1


def test_the_message_id_is_the_publishers_or_the_stream_sequence(nats_side: NatsSide) -> None:
    async def publish() -> None:
        import nats

        client = await nats.connect(nats_side.url)
        js = client.jetstream()
        await js.publish(nats_side.names.subject, b"a", headers=headers_of("order:1"))
        await js.publish(
            nats_side.names.subject,
            b"b",
            headers={**headers_of("order:2"), adapter.NATS_MSG_ID: "outbox-42"},
        )
        await client.close()

    asyncio.run(publish())
    seen = Seen(IdempotentConsumer(Guard(MemoryStore()), "stock", lambda m: None))

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(consuming(seen, nats_side, stop))
        await until(lambda: len(seen.messages) == 2)
        stop.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    by_body = {m.body: m for m in seen.messages}
    assert by_body[b"a"].id == "1"  # the stream sequence
    assert by_body[b"b"].id == "outbox-42"
    assert by_body[b"b"].headers["idempotency-key"] == "order:2"
    assert {m.attempt for m in seen.messages} == {1}
