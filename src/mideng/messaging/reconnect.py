"""A bounded exponential backoff for an adapter whose broker connection dropped.

The delay doubles from ``initial`` up to ``cap`` while attempts keep failing and starts over
once one works, so a blip costs a fraction of a second and a broker that stays down is asked
at most once every ``cap`` seconds, never in a busy loop. The wait ends early when ``stop`` is
set, so a consumer that is backing off still stops promptly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from mideng.core.policy import doubled


async def wait_or_stop(seconds: float, stop: asyncio.Event) -> None:
    """Sleep ``seconds`` unless ``stop`` is set first."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


class Backoff:
    """``failed()`` after each failed attempt gives the delay to ``wait(delay, stop)``;
    ``reset()`` after an attempt that worked.

    ``wait(seconds, stop)`` does the waiting; tests give it one that records the delays.
    """

    def __init__(
        self,
        initial: float = 0.1,
        cap: float = 5.0,
        wait: Callable[[float, asyncio.Event], Awaitable[None]] = wait_or_stop,
    ) -> None:
        if initial <= 0 or cap < initial:
            raise ValueError(f"need 0 < initial <= cap: {initial!r}, {cap!r}")
        self.initial, self.cap, self.wait = initial, cap, wait
        self.failures = 0  # in a row, since the last attempt that worked

    def failed(self) -> float:
        """Count a failure; the delay before the next attempt."""
        self.failures += 1
        return doubled(self.initial, self.cap, self.failures)

    def reset(self) -> int:
        """Forget the failures; how many there were in a row (not 0: a reconnect to report)."""
        had, self.failures = self.failures, 0
        return had
