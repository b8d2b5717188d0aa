"""Retry and dead letter: a failed run goes back and runs again once its delay has passed; a
message that keeps failing is tried ``max_attempts`` times, copied to the dead-letter
destination with the reason and settled, while the rest go on; a dead letter's copy carries
the message's headers as they came, whatever their types."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any, ClassVar

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message
from mideng.stores.memory import MemoryStore
from tests.messaging.base.broker import Broker, DeadCopy, Runs, key, keyed, until
from tests.messaging.running import consume_until

POISON = "order:poison"


class RetryCases:
    #: One message's headers as a client in another language sends them (the broker
    #: client's own form), with no business key among them: it is dead-lettered at once.
    sent_headers: ClassVar[Any]
    #: The body that message is sent with, and its copy holds.
    sent_body: ClassVar[bytes] = b"{}"

    def copied_headers(self, reason: str, sent: list[str]) -> Any:
        """The headers of the dead copy of the message ``sent_headers`` made (``sent``: its
        id, where the broker told it), as the broker's client reads them back."""
        raise NotImplementedError

    def test_a_failed_run_goes_back_and_runs_again_after_its_delay(self, broker: Broker) -> None:
        self.retried(broker)

    def retried(self, broker: Broker) -> list[Message]:
        """The scenario; every message the handler was given, in order."""
        ran: dict[str, list[float]] = {}
        messages: list[Message] = []

        def flaky(message: Message) -> None:
            messages.append(message)
            ran.setdefault(key(message), []).append(time.monotonic())
            if key(message) == "order:1" and len(ran["order:1"]) == 1:
                raise TimeoutError("inventory service timed out")

        consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", flaky, retry_delay=0.5)
        broker.publish(keyed("order:1", "order:2", "order:3"))

        async def done() -> bool:
            return len(ran.get("order:1", [])) == 2 and len(ran) == 3 and await broker.asettled()

        asyncio.run(consume_until(lambda stop: broker.consume(consumer, stop), done))
        assert broker.unsettled() == 0
        first, second = ran["order:1"]
        assert second - first >= 0.5
        assert [len(ran[k]) for k in ("order:2", "order:3")] == [1, 1]
        return messages

    def test_poison_is_tried_n_times_dead_lettered_and_the_rest_go_on(self, broker: Broker) -> None:
        tries: list[str] = []

        def handler(message: Message) -> None:
            tries.append(key(message))
            if key(message) == POISON:
                raise ValueError("stock row is locked forever")

        guard = Guard(MemoryStore(), lease=5)
        consumer = IdempotentConsumer(guard, "stock", handler, max_attempts=3, retry_delay=0.05)
        others = [f"order:{n}" for n in range(20)]
        broker.publish(keyed(POISON, *others))
        options = broker.dead_letter_options()

        async def scenario() -> None:
            stop = asyncio.Event()
            task = asyncio.ensure_future(broker.consume(consumer, stop, **options))
            await until(lambda: tries.count(POISON) == 3 and len(set(tries)) == 21)
            # Published after the poison was given up on: the consumer is still going.
            await asyncio.to_thread(broker.publish, keyed("order:late"))
            await until(lambda: "order:late" in tries)
            await asyncio.to_thread(broker.until_settled)
            stop.set()
            await asyncio.wait_for(task, 20)

        asyncio.run(scenario())
        assert broker.unsettled() == 0
        assert tries.count(POISON) == 3
        assert Counter(k for k in tries if k != POISON) == Counter([*others, "order:late"])
        copies = broker.dead_letters()
        assert [c.key for c in copies] == [POISON]
        assert "failed 3 time(s)" in copies[0].reason

    def test_a_dead_copy_carries_the_headers_as_they_came(self, broker: Broker) -> None:
        self.copied(broker)

    def copied(self, broker: Broker) -> DeadCopy:
        """The scenario; the one copy it made."""
        runs = Runs(lease=10)
        sent = broker.publish_headers(self.sent_headers)
        options = broker.dead_letter_options()

        async def copied() -> bool:  # and settled: acked or terminated, not sent back for ever
            return bool(runs.dead) and await broker.asettled()

        asyncio.run(
            consume_until(lambda stop: broker.consume(runs.consumer, stop, **options), copied, 20)
        )
        assert broker.unsettled() == 0  # settled with its copy, none left to come back
        [reason] = runs.dead  # dead-lettered once
        assert "has no business key" in reason
        [copy] = broker.dead_letters()  # one copy, not one a try
        assert copy.reason == reason
        assert copy.headers == self.copied_headers(reason, sent)
        assert copy.body == self.sent_body
        return copy
