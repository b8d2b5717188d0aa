"""Reconnect: the consumer's broker connection dropped for real under a live consumer (closed
by the broker, killed by the server, or reset by a proxy: each broker's ``Link``), while it
waits for deliveries and after handlers ran, before their acks. Consume goes on by itself;
each key's handler runs once, the messages whose ack was lost come back and are settled as
duplicates, and nothing is left on the broker."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import pytest

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message
from mideng.stores.memory import MemoryStore
from tests.messaging.base.broker import Broker, key, keyed, outcomes
from tests.messaging.running import consume_until

#: Drops a scenario makes: each reaches the adapter, none is the last thing that happens.
DROPS = 3
UNIQUE = [f"order:{n}" for n in range(15)]
KEYS = UNIQUE + UNIQUE[:5]  # five published twice


def reconnects_logged(broker: Broker, caplog: pytest.LogCaptureFixture, *, each: bool) -> None:
    """Each drop logged as a lost connection, and the reconnects after them: one a drop when
    ``each`` session the drops ended had started consuming, and the broker logs one a
    session."""
    if broker.reconnect_lines == "none":
        return
    assert outcomes(caplog, "connection_lost") >= DROPS
    one_each = each and broker.reconnect_lines == "each"
    assert outcomes(caplog, "reconnected") >= (DROPS if one_each else 1)


class ReconnectCases:
    def test_a_connection_dropped_while_waiting_for_deliveries_is_reconnected(
        self, broker: Broker, caplog: pytest.LogCaptureFixture
    ) -> None:
        runs: Counter[str] = Counter()
        consumer = IdempotentConsumer(
            Guard(MemoryStore()), "stock", lambda m: runs.update([key(m)])
        )
        drops = 0

        async def scenario() -> None:
            async with broker.droppable() as link:

                async def dropped_then_published() -> bool:
                    nonlocal drops
                    if drops < DROPS:
                        drops += await asyncio.to_thread(link.drop, True)
                        if drops == DROPS:
                            await asyncio.to_thread(link.broker.publish, keyed(*KEYS))
                        return False
                    return len(runs) == len(UNIQUE) and await link.broker.asettled()

                await consume_until(
                    lambda stop: link.consume(consumer, stop), dropped_then_published, 60
                )
                assert await asyncio.to_thread(link.broker.unsettled) == 0

        with caplog.at_level(logging.WARNING):
            asyncio.run(scenario())
        assert drops == DROPS
        assert runs == Counter(UNIQUE)  # every key once, none twice
        # A drop may land before a new session consumes: two drops, one reconnect then.
        reconnects_logged(broker, caplog, each=False)

    def test_a_connection_dropped_after_the_handlers_before_the_acks_reruns_nothing(
        self, broker: Broker, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING):
            self.dropped_under_the_handlers(broker)
        reconnects_logged(broker, caplog, each=True)
        # The messages whose ack was lost were handed out again and settled without running
        # (the five keys published twice add five more of these).
        assert outcomes(caplog, "replay") >= DROPS + 5

    def dropped_under_the_handlers(self, broker: Broker, **options: Any) -> None:
        """The scenario, ``options`` to the adapter: a handler drops the connection its
        message's ack will need, DROPS times. A drop lands only on a live connection: between
        a drop and the reconnect, the handlers of the messages in hand find none, so only the
        drops that landed are counted."""
        runs: Counter[str] = Counter()
        drops: list[int] = []

        async def scenario() -> None:
            async with broker.droppable() as link:

                def handler(message: Message) -> None:  # run off the event loop
                    runs.update([key(message)])
                    if len(drops) < DROPS and (dropped := link.drop()):
                        drops.append(dropped)

                consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", handler)
                await asyncio.to_thread(link.broker.publish, keyed(*KEYS))

                async def done() -> bool:
                    return len(runs) == len(UNIQUE) and await link.broker.asettled()

                await consume_until(lambda stop: link.consume(consumer, stop, **options), done, 60)
                assert await asyncio.to_thread(link.broker.unsettled) == 0

        asyncio.run(scenario())
        assert len(drops) == DROPS
        assert runs == Counter(UNIQUE)  # handed out again, not run again
