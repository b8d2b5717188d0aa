"""The JetStream adapter's task cancelled (not stopped) after its handlers ran, while their
completion was written: the server redelivers the unacked messages after ``ack_wait``, and the
consumer acks them without running the handlers again."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from mideng import Guard
from mideng.core.record import Status
from mideng.messaging import IdempotentConsumer, Message
from mideng.stores.memory import MemoryStore
from tests.guard.gates import cancelled_at_completion
from tests.messaging.nats.conftest import NatsSide
from tests.messaging.nats.test_consume import consuming

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("count", [1, 4])
def test_a_consume_cancelled_at_the_completion_runs_nothing_twice(
    nats_side: NatsSide, count: int
) -> None:
    runs: Counter[str] = Counter()

    def handler(message: Message) -> None:
        runs.update([message.headers["idempotency-key"]])

    store = MemoryStore()
    consumer = IdempotentConsumer(Guard(store, lease=60), "stock", handler)
    keys = [f"order:{n}" for n in range(count)]
    nats_side.publish([(key, b"{}") for key in keys])

    async def scenario() -> None:
        # One message, or a batch of those fetched together: cancelled at the first completion.
        await cancelled_at_completion(store, consuming(consumer, nats_side, asyncio.Event()))
        assert runs  # the handlers in hand ran once; their messages went unacked

        def finished() -> bool:
            done = [store.get("stock", key) for key in keys]
            return all(r is not None and r.status is Status.SUCCEEDED for r in done)

        assert finished()  # completed before the cancellation was raised
        stop = asyncio.Event()
        again = asyncio.create_task(consuming(consumer, nats_side, stop))
        # Redelivered once ack_wait (2 s) has passed, then acked unrun: nothing left pending.
        deadline = asyncio.get_running_loop().time() + 20
        while True:
            info = await nats_side._info()
            if info is not None and info.num_ack_pending == 0 and info.num_pending == 0:
                break
            assert asyncio.get_running_loop().time() < deadline, "never acked"
            await asyncio.sleep(0.05)
        stop.set()
        await again

    asyncio.run(scenario())
    assert runs == Counter(keys)  # each key ran once: the redelivered ones were acked unrun
