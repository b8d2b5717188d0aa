"""Consume and ack: each key's handler runs once and every message is settled; a duplicate is
acked without running; a message without a business key is dead-lettered with the reason;
a stop finishes the message in hand and leaves the rest on the broker."""

from __future__ import annotations

import asyncio
import threading

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message
from mideng.messaging.headers import REQUEST_ID
from mideng.stores.memory import MemoryStore
from tests.helpers.storm import wait_for
from tests.messaging.base.broker import Broker, Runs, key, keyed
from tests.messaging.running import consume_until

BODY = b'{"qty": 1}'


class ConsumeCases:
    def test_each_key_runs_once_and_a_keyless_message_is_dead_lettered(
        self, broker: Broker
    ) -> None:
        runs = Runs()
        ids = broker.publish(
            keyed("order:1", "order:2", "order:1", None, body=BODY), {REQUEST_ID: "r1"}
        )

        async def done() -> bool:
            return len(runs.messages) == 2 and len(runs.dead) == 1 and await broker.asettled()

        options = broker.dead_letter_options()
        asyncio.run(
            consume_until(lambda stop: broker.consume(runs.consumer, stop, **options), done)
        )
        assert broker.unsettled() == 0  # nothing went back unacked on close
        seen = runs.messages
        if broker.ordered:
            assert runs.keys() == ["order:1", "order:2"]
            assert [m.id for m in seen] == ids[:2]
        else:
            assert sorted(runs.keys()) == ["order:1", "order:2"]
            assert sorted(str(m.id) for m in seen) == sorted(ids[:2])
        assert {m.body for m in seen} == {BODY}
        assert {m.headers[REQUEST_ID] for m in seen} == {"r1"}
        [copy] = broker.dead_letters()
        assert copy.key is None
        assert copy.reason == runs.dead[0]
        assert "has no business key" in copy.reason
        assert copy.body == BODY

    def test_stop_finishes_the_message_in_hand_and_leaves_the_rest(self, broker: Broker) -> None:
        started, release = threading.Event(), threading.Event()
        finished: list[str] = []

        def slow(message: Message) -> None:
            started.set()
            release.wait(10)
            finished.append(key(message))

        consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", slow)
        broker.publish(keyed("order:0"))
        later = [f"order:{n}" for n in range(1, 5)]

        async def scenario() -> None:
            stop = asyncio.Event()
            task = asyncio.ensure_future(broker.consume(consumer, stop))
            assert await asyncio.to_thread(started.wait, 20)
            await asyncio.to_thread(broker.publish, keyed(*later))
            await asyncio.to_thread(wait_for, broker.delivered, 10, "the later ones handed over")
            stop.set()  # mid-handler
            release.set()
            await asyncio.wait_for(task, 15)

        asyncio.run(scenario())
        assert finished[0] == "order:0"
        assert sorted(finished) == sorted(set(finished))  # none twice
        if not broker.reads_ahead:
            assert finished == ["order:0"]  # nothing started after the stop
        # What ran was settled before consume returned; the rest is still on the broker.
        assert broker.unsettled() == 1 + len(later) - len(finished)
