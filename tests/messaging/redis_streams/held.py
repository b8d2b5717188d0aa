"""A memory store whose first batch completion waits for the test's word: the batch that
made it stays undecided (its handlers done, its records not yet finished) while the adapter
goes on with the next batch."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from mideng.stores.batch import Completion
from mideng.stores.memory import MemoryStore


class HeldStore(MemoryStore):
    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.go = asyncio.Event()
        self.completions = 0
        self.events: list[str] = []
        # Set when nothing released the held completion: the adapter did not go on with the
        # next batch while this one waited.
        self.starved = False

    async def aclaim_many(self, reqs: Sequence[Any]) -> list[Any]:
        self.events.append(f"claim {' '.join(r.key for r in reqs)}")
        return await super().aclaim_many(reqs)

    async def acomplete_many(self, items: Sequence[Completion]) -> list[Any]:
        self.completions += 1
        keys = " ".join(i.ticket.key for i in items)
        if self.completions == 1:
            try:
                await asyncio.wait_for(self.go.wait(), 5)
            except TimeoutError:
                self.starved = True
                raise
        done = await super().acomplete_many(items)
        self.events.append(f"completed {keys}")
        return done
