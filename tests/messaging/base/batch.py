"""Batches: what the adapter fetched together is claimed in one store round trip; a run that
fails inside a batch goes back and runs again, a copy inside it runs once, and the rest of
the batch is settled."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

from mideng import Guard
from mideng.core.record import Claim, ClaimRequest
from mideng.messaging import IdempotentConsumer, Message
from mideng.stores.memory import MemoryStore
from tests.messaging.base.broker import Broker, key, keyed
from tests.messaging.running import consume_until


class Claims(MemoryStore):
    """A memory store counting its claim round trips, and those that claimed a batch."""

    def __init__(self) -> None:
        super().__init__()
        self.round_trips = self.batches = 0

    async def aclaim(self, req: ClaimRequest) -> Claim:
        self.round_trips += 1
        return await super().aclaim(req)

    async def aclaim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]:
        self.round_trips += 1
        self.batches += len(reqs) > 1
        return await super().aclaim_many(reqs)


class BatchCases:
    def test_a_batch_is_claimed_at_once_and_a_retry_inside_it_runs_again(
        self, broker: Broker
    ) -> None:
        keys = [f"order:{n}" for n in range(30)]
        flaky = set(keys[3::7])
        published = [*keys, *keys[:5]]  # five copies, fetched with their originals
        runs: Counter[str] = Counter()

        def handler(message: Message) -> None:
            runs.update([key(message)])
            if key(message) in flaky and runs[key(message)] == 1:
                raise TimeoutError("inventory service timed out")

        store = Claims()
        consumer = IdempotentConsumer(Guard(store), "stock", handler, retry_delay=0.2)
        broker.publish_batch(keyed(*published))

        async def done() -> bool:
            return sum(runs.values()) == len(keys) + len(flaky) and await broker.asettled()

        asyncio.run(consume_until(lambda stop: broker.consume(consumer, stop), done))
        assert broker.unsettled() == 0
        assert runs == {k: 2 if k in flaky else 1 for k in keys}
        assert store.batches >= 1  # a batch of messages claimed in one round trip
        # Fewer round trips than claims: every message once, every retry once more.
        assert store.round_trips < len(published) + len(flaky)
