"""A publisher that keeps what it was given, and fails when a test says so."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from mideng.messaging.publish import Outgoing


class Recording:
    def __init__(self, fail: Callable[[Outgoing], bool] | None = None, delay: float = 0.0) -> None:
        self.sent: list[Outgoing] = []
        self.fail = fail
        self.delay = delay
        self.started = self.closed = 0
        self.published = asyncio.Event()
        # While a test holds this (an unset event), every publish waits for it: a batch stays
        # in flight until the test has seen what it needs to happen meanwhile.
        self.held: asyncio.Event | None = None

    async def start(self) -> None:
        self.started += 1

    async def publish(self, message: Outgoing) -> None:
        if self.held is not None:
            await self.held.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None and self.fail(message):
            raise ConnectionError(f"broker refused {message.message_id}")
        self.sent.append(message)
        self.published.set()

    async def close(self) -> None:
        self.closed += 1

    def bodies(self) -> list[Any]:
        return [json.loads(message.body) for message in self.sent]
