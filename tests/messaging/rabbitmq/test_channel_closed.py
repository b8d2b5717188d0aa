"""The broker closes the consumer's channel while the connection stays up (a channel error:
here a passive declare of a queue that does not exist, made on that very channel): the
adapter notices, as it does a closed connection, logs why, and consumes on from a new
session. Closed while it waited for deliveries, it waited for good: none comes on a closed
channel, and nothing was logged. Closed under a handler, the failed ack was logged as a lost
connection, the channel error's reason nowhere."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import aiormq
import pytest

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message
from mideng.stores.memory import MemoryStore
from tests.brokers import BrokerNames
from tests.messaging.rabbitmq.test_adapter import consume_through

KEY = "idempotency-key"
FIRST = [f"order:{n}" for n in range(3)]
LATER = [f"order:{n}" for n in range(3, 6)] + ["order:3"]  # one published twice


def closings(caplog: pytest.LogCaptureFixture) -> int:
    return sum(getattr(r, "mideng_outcome", None) == "channel_closed" for r in caplog.records)


async def channel_error(channel: Any, missing: str) -> None:
    """A passive declare of ``missing`` on ``channel``: the broker answers NOT_FOUND by closing
    the channel; the connection stays."""
    with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity):
        await channel.queue_declare(missing, passive=True)


@pytest.mark.parametrize("closed", ["while waiting", "while a handler runs"])
def test_a_channel_the_broker_closes_is_opened_again_and_consumed_on(
    broker_names: BrokerNames, caplog: pytest.LogCaptureFixture, closed: str
) -> None:
    queue = broker_names.rabbitmq_queue()
    missing = broker_names.name("never-declared")
    runs: Counter[str] = Counter()
    channels: list[Any] = []  # the consumer's channel, as its deliveries carry it
    loop: asyncio.AbstractEventLoop | None = None

    def handler(message: Message) -> None:  # run off the event loop
        runs.update([message.headers[KEY]])
        channels.append(message.raw.channel)
        if closed == "while a handler runs" and len(runs) == len(FIRST):
            # This message's ack is still to be sent, on the channel closed under it.
            assert loop is not None
            asyncio.run_coroutine_threadsafe(channel_error(channels[-1], missing), loop).result()

    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", handler)

    async def close_channel() -> bool:
        if closed == "while waiting":
            await channel_error(channels[-1], missing)
        return True

    async def scenario() -> None:
        nonlocal loop
        loop = asyncio.get_running_loop()
        await consume_through(consumer, queue, runs, close_channel, (FIRST, LATER))

    with caplog.at_level(logging.WARNING, logger="mideng"):
        asyncio.run(scenario())
    assert runs == Counter(f"order:{n}" for n in range(6))  # each once, the repeat acked unrun
    assert closings(caplog) == 1
    assert channels[-1] is not channels[0]  # the later ones came on a channel of their own
