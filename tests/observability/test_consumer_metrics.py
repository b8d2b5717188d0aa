"""Consumer messages counted by verdict, one at a time and batched: ran, duplicate, retry,
dead_letter (a message without a key, and one whose handler failed past its attempts)."""

from __future__ import annotations

import asyncio
from collections import Counter

from prometheus_client import CollectorRegistry

from mideng import Guard
from mideng.messaging import Ack, IdempotentConsumer, Message, Retry, Verdict
from mideng.stores.memory import MemoryStore
from tests.observability.scrape import series


def msg(key: str | None) -> Message:
    return Message(b"{}", {} if key is None else {"idempotency-key": key})


def handler(message: Message) -> None:
    if message.headers.get("idempotency-key") == "order:bad":
        raise RuntimeError("declined")


def label(verdict: Verdict) -> str:
    if isinstance(verdict, Ack):
        return "ran" if verdict.ran else "duplicate"
    return "retry" if isinstance(verdict, Retry) else "dead_letter"


def test_every_verdict_is_counted(registry: CollectorRegistry) -> None:
    guard = Guard(MemoryStore(), lease=5)
    consumer = IdempotentConsumer(guard, "stock", handler, max_attempts=2, retry_delay=0.01)
    seen: Counter[str] = Counter()

    async def deliveries() -> None:
        for key in ("order:1", "order:2", "order:1", None):
            seen[label(await consumer.handle(msg(key)))] += 1
        while True:  # redelivered as a broker would, after each Retry's delay
            verdict = await consumer.handle(msg("order:bad"))
            seen[label(verdict)] += 1
            if not isinstance(verdict, Retry):
                break
            await asyncio.sleep(verdict.delay)
        batch = [msg("order:3"), msg("order:3"), msg("order:2")]
        seen.update(label(v) for v in await consumer.handle_batch(batch))

    asyncio.run(deliveries())
    assert seen["ran"] == 3  # order:1, order:2, order:3
    assert seen["duplicate"] == 3  # order:1 again, order:3's copy, order:2 again
    assert seen["dead_letter"] == 2  # no key; order:bad past its attempts
    assert seen["retry"] >= 1  # order:bad's first attempt failed
    counted = series(registry, "mideng_consumer_messages_total")
    assert counted == {(("scope", "stock"), ("verdict", v)): n for v, n in seen.items()}
