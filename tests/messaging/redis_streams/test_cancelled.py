"""The Redis Streams adapter's task cancelled (not stopped) after its handlers ran, while their
completion was written: the entries stay pending for the member's name, and its next run acks
them without running the handlers again."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from mideng.core.record import Status
from mideng.messaging import Message
from tests.brokers import BrokerNames
from tests.guard.gates import cancelled_at_completion
from tests.messaging.redis_streams.test_reconnect import KEY, Run
from tests.messaging.running import consume_until


@pytest.mark.parametrize("count", [1, 4])
def test_a_consume_cancelled_at_the_completion_runs_nothing_twice(
    broker_names: BrokerNames, count: int
) -> None:
    runs: Counter[str] = Counter()

    def handler(message: Message) -> None:
        runs.update([message.headers[KEY]])

    run = Run(broker_names, handler)
    keys = [f"order:{n}" for n in range(count)]

    async def scenario() -> None:
        await run.publish(keys)
        # One entry, or a batch of those read together: cancelled at the first completion.
        await cancelled_at_completion(run.store, run.consume(asyncio.Event(), batch=10, block=0.2))
        assert runs  # the handlers in hand ran once, and their entries were not acked

        async def drained() -> bool:
            done = [run.store.get("stock", key) for key in keys]
            finished = all(r is not None and r.status is Status.SUCCEEDED for r in done)
            return finished and await run.drained()

        await consume_until(lambda stop: run.consume(stop, batch=10, block=0.2), drained)

    asyncio.run(scenario())
    assert runs == Counter(keys)  # each key ran once: the pending ones were acked unrun
