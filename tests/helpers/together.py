"""Work on many threads at once: each starts past a barrier, so all race for the same rows."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def together(threads: int, work: Callable[[int], list[T]]) -> list[T]:
    """``work(n)`` for n in 0 .. ``threads``-1, each on its own thread, all released at once;
    what they returned, in one list."""
    barrier = threading.Barrier(threads)

    def released(n: int) -> list[T]:
        barrier.wait()
        return work(n)

    with ThreadPoolExecutor(threads) as pool:
        return [item for part in pool.map(released, range(threads)) for item in part]
