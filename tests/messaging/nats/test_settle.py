"""How the JetStream adapter settles each verdict, on scripted messages: ack, nak with the
delay, term (after the dead-letter copy, or a nak when the copy fails), and a consumer that
raises sending the whole batch back after a pause rather than losing or busy-looping it."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from mideng.messaging import Ack, DeadLetter, Message, Retry, Verdict

adapter = importlib.import_module("mideng.messaging.nats.consume")


class Raw:
    def __init__(self, sequence: int, calls: list[tuple[int, str, Any]]) -> None:
        self.data = b"{}"
        self.headers = {"idempotency-key": f"order:{sequence}"}
        self.metadata = SimpleNamespace(sequence=SimpleNamespace(stream=sequence), num_delivered=2)
        self.sequence, self.calls = sequence, calls

    async def ack(self) -> None:
        if self.sequence == 2 and self.headers.get("fail-ack"):
            raise ConnectionError("lost the connection while acking")
        self.calls.append((self.sequence, "ack", None))

    async def nak(self, delay: float | None = None) -> None:
        self.calls.append((self.sequence, "nak", delay))

    async def term(self) -> None:
        self.calls.append((self.sequence, "term", None))

    async def in_progress(self) -> None:
        self.calls.append((self.sequence, "in_progress", None))


class JetStream:
    def __init__(self, fails: bool) -> None:
        self.fails = fails
        self.published: list[tuple[str, bytes, dict[str, str]]] = []

    async def publish(self, subject: str, body: bytes, headers: dict[str, str]) -> None:
        if self.fails:
            raise ConnectionError("server gone")
        self.published.append((subject, body, headers))


class Scripted:
    def __init__(self, verdicts: list[Verdict] | None) -> None:
        self.verdicts = verdicts
        self.seen: list[Message] = []

    async def handle(self, message: Message) -> Verdict:
        return (await self.handle_batch([message]))[0]

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        self.seen.extend(messages)
        if self.verdicts is None:
            raise RuntimeError("store down")
        return self.verdicts


def settle(verdicts: list[Verdict] | None, dead: str | None, fails: bool = False) -> Any:
    calls: list[tuple[int, str, Any]] = []
    fetched = [Raw(n, calls) for n in range(1, 5)]
    consumer, jetstream = Scripted(verdicts), JetStream(fails)
    asyncio.run(adapter._process(consumer, jetstream, fetched, 30.0, dead))
    return calls, jetstream.published, consumer.seen


def test_each_verdict_is_carried_out() -> None:
    verdicts: list[Verdict] = [Ack(True), Ack(False), Retry(2.5, "held"), DeadLetter("poison")]
    calls, published, seen = settle(verdicts, "orders.dead")
    assert calls == [(1, "ack", None), (2, "ack", None), (3, "nak", 2.5), (4, "term", None)]
    assert published == [
        ("orders.dead", b"{}", {"idempotency-key": "order:4", adapter.DEAD_LETTER_REASON: "poison"})
    ]
    assert [(m.id, m.attempt) for m in seen] == [("1", 2), ("2", 2), ("3", 2), ("4", 2)]


def test_a_dead_letter_without_a_dead_subject_is_terminated() -> None:
    calls, published, _ = settle([DeadLetter("poison")] * 4, None)
    assert calls == [(n, "term", None) for n in range(1, 5)]
    assert published == []


def test_a_failed_dead_letter_copy_is_nakd_not_terminated() -> None:
    calls, _, _ = settle([DeadLetter("poison")] * 4, "orders.dead", fails=True)
    assert calls == [(n, "nak", adapter.UNDECIDED_DELAY) for n in range(1, 5)]


def test_a_consumer_that_raises_sends_the_batch_back_after_a_pause() -> None:
    calls, _, _ = settle(None, None)
    assert calls == [(n, "nak", adapter.UNDECIDED_DELAY) for n in range(1, 5)]


def test_a_settle_that_fails_leaves_the_rest_of_the_batch_settled() -> None:
    calls: list[tuple[int, str, Any]] = []
    fetched = [Raw(n, calls) for n in range(1, 4)]
    fetched[1].headers["fail-ack"] = "1"
    consumer = Scripted([Ack(True)] * 3)
    asyncio.run(adapter._process(consumer, JetStream(False), fetched, 30.0, None))
    assert calls == [(1, "ack", None), (3, "ack", None)]
