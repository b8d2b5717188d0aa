"""Batches in flight at once: the next batch is claimed and published while one is written back.

A batch's claim and write-back are database round trips during which that batch publishes
nothing; run one batch at a time and the broker idles through them. ``drain`` keeps up to
``depth`` batches in hand, each a task that publishes its rows and then writes them back, and
claims the next one as soon as fewer are in hand. That is as safe as ``depth`` relays side by
side: a batch leases its keys, so a claim never takes a key another batch in flight still holds
(it is not due until that batch's write-back lets it go), and the claim that takes it next
reads from the mark that write-back moved. Per-key order, the fenced write-back and the
backoff are those of a single batch.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

W = TypeVar("W")


@dataclass(frozen=True)
class Batch:
    """What one batch did (or several, summed)."""

    claimed: int
    sent: int
    failed: int
    dead: int

    def plus(self, other: Batch) -> Batch:
        return Batch(
            self.claimed + other.claimed,
            self.sent + other.sent,
            self.failed + other.failed,
            self.dead + other.dead,
        )


NOTHING = Batch(0, 0, 0, 0)


async def drain(
    claim: Callable[[], Awaitable[W | None]],
    finish: Callable[[W], Coroutine[Any, Any, Batch]],
    depth: int,
    stop: asyncio.Event | None = None,
) -> Batch:
    """Claim batches (``claim``: ``None`` when nothing is free) and ``finish`` each (publish,
    then write back), up to ``depth`` at once; the totals.

    Claiming ends when a claim finds nothing while no batch is in flight (one in flight may
    let go of keys that have more rows: claim again when it is done), when a finished batch
    sent nothing (what is left is failing or waiting for its retry: a caller polls), when
    ``stop`` is set, or at the first error. Every batch in hand is then finished, whatever
    happened to the others, so nothing published is left unwritten when it could be written;
    the first error is raised after that.
    """
    total = NOTHING
    in_flight: set[asyncio.Task[Batch]] = set()
    error: Exception | None = None
    claiming = True
    try:
        while True:
            if claiming and stop is not None and stop.is_set():
                claiming = False
            if claiming and len(in_flight) < depth:
                try:
                    work = await claim()
                except Exception as exc:
                    error, claiming = exc, False
                    continue
                if work is not None:
                    in_flight.add(asyncio.create_task(finish(work)))
                    continue
                if not in_flight:
                    break
            elif not in_flight:
                break
            done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                in_flight.discard(task)
                try:
                    batch = task.result()
                except Exception as exc:
                    error = error or exc
                    claiming = False
                    continue
                total = total.plus(batch)
                if batch.sent == 0:
                    claiming = False
    finally:
        # Only a cancellation of the caller gets here with batches in flight: they go too.
        for task in in_flight:
            task.cancel()
        for task in in_flight:
            with contextlib.suppress(BaseException):
                await task
    if error is not None:
        raise error
    return total
