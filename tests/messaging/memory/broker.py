"""The in-process broker as the base suite drives it: a broker of the test's own name, its
queue, and dead letters on ``<queue>.dead``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from mideng.messaging import memory as adapter
from mideng.messaging.headers import IDEMPOTENCY_KEY
from tests.brokers import token
from tests.messaging.base.broker import Broker, Consuming, DeadCopy, Link, Outgoing


class InProcess(Broker):
    """A fresh ``memory://`` broker and queue."""

    broker = "memory"
    lease = 10.0

    def __init__(self, batch: int = 10) -> None:
        self.url = f"memory://test-{token()}"
        self.queue = "orders"
        self.dead = f"{self.queue}.dead"
        self.batch = batch
        self.held = adapter.named(self.url)

    def adapter(self, slot: int = 0) -> dict[str, Any]:
        return {"queue": self.queue, "batch": self.batch, "fetch_timeout": 0.5}

    def consume(self, consumer: Any, stop: asyncio.Event, **options: Any) -> Consuming:
        return adapter.consume(consumer, self.url, stop=stop, **{**self.adapter(), **options})

    def publish(
        self, messages: Sequence[Outgoing], headers: Mapping[str, str] | None = None
    ) -> list[str]:
        ids = []
        for key, body in messages:
            sent = {**(headers or {}), **({} if key is None else {IDEMPOTENCY_KEY: key})}
            ids.append(self.held.put(self.queue, body, sent).message_id)
        return ids

    def publish_headers(self, *messages: Any) -> list[str]:
        return [self.held.put(self.queue, b"{}", headers).message_id for headers in messages]

    def dead_letter_options(self) -> dict[str, Any]:
        return {"dead_queue": self.dead}

    def dead_letters(self, at_least: int = 1) -> list[DeadCopy]:
        return [
            DeadCopy(
                d.headers.get(IDEMPOTENCY_KEY),
                d.headers.get(adapter.DEAD_LETTER_REASON, ""),
                d.body,
                d.headers,
                d,
            )
            for d in self.held.waiting(self.dead)
        ]

    def unsettled(self) -> int:
        return self.held.unsettled(self.queue)

    def droppable(self) -> AbstractAsyncContextManager[Link]:
        # The reconnect cases are skipped for this broker (test_suite.py says why).
        raise NotImplementedError("an in-process broker has no connection to drop")
