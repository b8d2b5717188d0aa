"""Small timing helpers shared by the benchmarks: medians of many runs after a warm-up."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable


def per_call_us(fn: Callable[[int], object], n: int, repeats: int = 5, warmup: int = 200) -> float:
    """Median over ``repeats`` batches of ``n`` calls of fn(i), in microseconds per call.

    ``i`` runs on across batches, so a benchmark of first calls never repeats a key.
    """
    counter = iter(range(10**12))
    for _ in range(warmup):
        fn(next(counter))
    batches = []
    gc.collect()
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            fn(next(counter))
        batches.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(batches)


def table(rows: list[tuple[str, float, float | None]], floor_label: str = "floor") -> str:
    lines = [f"| case | µs/call | x {floor_label} |", "|---|---:|---:|"]
    for name, us, ratio in rows:
        lines.append(f"| {name} | {us:.1f} | {'-' if ratio is None else f'{ratio:.2f}'} |")
    return "\n".join(lines)
