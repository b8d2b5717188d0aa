"""Cancellation: the adapter's task cancelled (not stopped) after its handlers ran, while
their completion was written. The cancellation settles nothing, so the broker hands the
messages out again (requeued with the closed channel, redelivered after ``ack_wait``,
pending for the member's name, read again from the last committed offset); the next consume
settles them without running the handlers again.

The consumer-level halves (a cancellation after the claim gives the key back at once, one
in a batch completes what ran, a def handler's thread is waited for) are
tests/messaging/test_cancellation.py's."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from mideng.core.record import Status
from mideng.messaging import Ack
from tests.guard.gates import cancelled_at_completion
from tests.helpers.storm import wait_for
from tests.messaging.base.broker import Broker, Recording, Runs, keyed
from tests.messaging.running import consume_until


class CancelCases:
    @pytest.mark.parametrize("count", [1, 3])
    def test_a_consume_cancelled_at_the_completion_runs_nothing_twice(
        self, broker: Broker, count: int
    ) -> None:
        runs = Runs(lease=60)
        keys = [f"order:{n}" for n in range(count)]

        def finished(some: list[str]) -> bool:
            done = [runs.store.get("stock", key) for key in some]
            return all(r is not None and r.status is Status.SUCCEEDED for r in done)

        async def scenario() -> None:
            ids = await asyncio.to_thread(broker.publish_batch, keyed(*keys))
            first = Recording(runs.consumer)
            # One message, or a batch of those fetched together: cancelled at the first
            # completion (the helper fails unless the consume raised its cancellation).
            consume = broker.consume(first, asyncio.Event())
            await asyncio.wait_for(cancelled_at_completion(runs.store, consume), 30)
            handed = first.ids()
            assert first.batches == [handed]  # one batch was in hand when it was cancelled
            assert handed == (ids if broker.fetches else ids[: len(handed)])
            assert first.verdicts == []  # no verdict came back: the cancellation cut it short
            ran = keys[: len(handed)]
            assert runs.counted == Counter(ran)  # each handler in hand ran once
            assert finished(ran)  # completed before the cancellation was raised

            # Nothing was settled: every message is still the broker's to hand out.
            def held() -> bool:
                return broker.unsettled() == count

            await asyncio.to_thread(wait_for, held, 20, "every message back on the broker")

            second = Recording(runs.consumer)

            async def drained() -> bool:
                return finished(keys) and await broker.asettled()

            await consume_until(lambda stop: broker.consume(second, stop), drained)
            # Handed out again, in order; those that ran are settled as duplicates, unrun.
            assert second.ids() == ids
            assert second.verdicts == [Ack(ran=i not in handed) for i in ids]

        asyncio.run(scenario())
        assert broker.unsettled() == 0
        assert runs.counted == Counter(keys)  # each key ran once
