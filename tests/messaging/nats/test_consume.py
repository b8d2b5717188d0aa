"""The JetStream adapter against the real server, beyond the base suite: an existing durable
is bound as it is; a handler longer than ack_wait is kept in progress (never redelivered
meanwhile); a bare asyncio.TimeoutError from fetch is a quiet poll; the message's id and
attempt come from the broker."""

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
from tests.messaging.base.broker import until
from tests.messaging.nats.broker import JetStream

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


def test_an_existing_durable_is_bound_as_it_is(nats_side: JetStream) -> None:
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
        task = asyncio.create_task(nats_side.consume(consumer, stop, ack_wait=30))
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
    nats_side: JetStream,
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


def test_a_handler_longer_than_ack_wait_is_kept_in_progress(nats_side: JetStream) -> None:
    async def handler(message: Message) -> None:
        await asyncio.sleep(3.0)  # three times the durable's ack_wait

    seen = Seen(IdempotentConsumer(Guard(MemoryStore(), lease=10), "stock", handler))
    other = Seen(IdempotentConsumer(Guard(MemoryStore(), lease=10), "stock", handler))
    nats_side.publish([("order:slow", b"{}")])

    async def scenario() -> None:
        stop = asyncio.Event()
        first = asyncio.create_task(nats_side.consume(seen, stop, ack_wait=1.0, batch=1))
        await until(lambda: len(seen.messages) == 1)
        # A second consumer on the durable would be handed the message if its clock ran out.
        second = asyncio.create_task(nats_side.consume(other, stop, ack_wait=1.0, batch=1))
        await asyncio.to_thread(nats_side.until_settled, 15)
        stop.set()
        await asyncio.wait_for(asyncio.gather(first, second), 10)

    asyncio.run(scenario())
    assert [m.attempt for m in seen.messages] == [1]
    assert other.messages == []
    assert nats_side.info().num_redelivered == 0


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
    nats_side: JetStream, monkeypatch: pytest.MonkeyPatch, error: str
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
        task = asyncio.create_task(nats_side.consume(consumer, stop))
        await until(lambda: len(runs) == 1)
        stop.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    assert len(raised) == 2
    assert runs[0].attempt == 1


def test_a_connection_closed_for_good_is_replaced_by_a_new_client(
    nats_side: JetStream, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nats.errors import ConnectionClosedError

    raised = _fetch_failing(monkeypatch, ConnectionClosedError(), 1)
    runs: list[Message] = []
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", runs.append)
    nats_side.publish([("order:1", b"{}")])

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(nats_side.consume(consumer, stop, reconnect=Backoff(0.01, 0.05)))
        await until(lambda: len(runs) == 1)
        stop.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    assert len(raised) == 1
    assert len(runs) == 1


def test_the_message_id_is_the_publishers_or_the_stream_sequence(nats_side: JetStream) -> None:
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
        task = asyncio.create_task(nats_side.consume(seen, stop))
        await until(lambda: len(seen.messages) == 2)
        stop.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    by_body = {m.body: m for m in seen.messages}
    assert by_body[b"a"].id == "1"  # the stream sequence
    assert by_body[b"b"].id == "outbox-42"
    assert by_body[b"b"].headers["idempotency-key"] == "order:2"
    assert {m.attempt for m in seen.messages} == {1}


def test_the_next_batch_is_fetched_while_one_is_decided_and_kept_alive_meanwhile(
    nats_side: JetStream,
) -> None:
    release = asyncio.Event()
    ran: list[str] = []

    async def handler(message: Message) -> None:
        if not ran:
            await release.wait()
        ran.append(message.headers["idempotency-key"])

    seen = Seen(IdempotentConsumer(Guard(MemoryStore(), lease=10), "stock", handler))
    keys = [f"order:{n}" for n in range(4)]
    nats_side.publish([(k, b"{}") for k in keys])

    async def scenario() -> Any:
        stop = asyncio.Event()
        task = asyncio.create_task(nats_side.consume(seen, stop, ack_wait=1.0, batch=2))
        await until(lambda: len(seen.messages) == 2)
        # The first batch is held in its handler; the second is in hand too, none pending.
        for _ in range(40):
            info = await asyncio.to_thread(nats_side.info)
            if not info.num_pending:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(2.5)  # past ack_wait: the waiting batch is kept in progress
        held = (len(seen.messages), info.num_pending, info.num_ack_pending)
        release.set()
        await asyncio.to_thread(nats_side.until_settled, 15)
        stop.set()
        await asyncio.wait_for(task, 10)
        return held

    # Only the first batch was handed to the consumer meanwhile; both were fetched.
    assert asyncio.run(scenario()) == (2, 0, 4)
    assert ran == keys  # in order, each once
    assert nats_side.info().num_redelivered == 0
