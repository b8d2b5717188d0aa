"""A dead-lettered message gets its copy on the dead subject whatever JetStream headers its
publisher set: a ``Nats-Msg-Id`` (every message mideng publishes carries one), which the
message's own stream already holds in its duplicate window, or an expectation
(``Nats-Expected-Last-Sequence``) that held for the message and fails for its copy."""

from __future__ import annotations

import asyncio

import pytest

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message
from mideng.messaging import nats as adapter
from mideng.stores.memory import MemoryStore
from tests.messaging.base.broker import until
from tests.messaging.nats.broker import JetStream

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "control",
    [{adapter.NATS_MSG_ID: "evt-poison"}, {"Nats-Expected-Last-Sequence": "0"}],
    ids=["msg-id", "expected-last-sequence"],
)
def test_the_dead_copy_does_not_carry_the_publishers_jetstream_headers(
    nats_side: JetStream, control: dict[str, str]
) -> None:
    # JetStream drops a publish whose Nats-Msg-Id it saw within the window and answers it
    # as a success: the message was terminated with no copy anywhere. An expectation that
    # fails for the copy had it nak'd and dead-lettered again, for ever.
    tries: list[str] = []

    def handler(message: Message) -> None:
        tries.append(message.headers["idempotency-key"])
        raise ValueError("never goes through")

    consumer = IdempotentConsumer(Guard(MemoryStore(), lease=5), "stock", handler, max_attempts=1)
    dead = nats_side.dead

    async def scenario() -> None:
        import nats

        client = await nats.connect(nats_side.url)
        try:
            await client.jetstream().publish(
                nats_side.names.subject,
                b"{}",
                headers={"idempotency-key": "order:poison", **control},
            )
        finally:
            await client.close()
        stop = asyncio.Event()
        task = asyncio.create_task(nats_side.consume(consumer, stop, dead_subject=dead))
        await until(lambda: tries == ["order:poison"])
        await asyncio.to_thread(nats_side.until_settled)
        stop.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    copies = nats_side.dead_letters()
    assert [c.key for c in copies] == ["order:poison"]
    assert "failed 1 time(s)" in copies[0].reason
