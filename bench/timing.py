"""How the timed cases time their contenders: every call's time kept, the contenders taking
turns batch by batch in a new order every round, so a change in the machine's load (another
process, a checkpoint, a vacuum) slows all of them alike instead of whichever was running."""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections.abc import Awaitable, Callable

from bench.contenders import ACall, ACase, Call, Case


def timed(fn: Call, keys: list[str]) -> list[float]:
    """µs of each call fn(key)."""
    clock = time.perf_counter_ns
    times = []
    for key in keys:
        start = clock()
        fn(key)
        times.append((clock() - start) / 1000)
    return times


async def atimed(fn: ACall, keys: list[str]) -> list[float]:
    clock = time.perf_counter_ns
    times = []
    for key in keys:
        start = clock()
        await fn(key)
        times.append((clock() - start) / 1000)
    return times


def run_sync(cases: list[Case], calls: int, rounds: int, warm: int, tag: str = "") -> None:
    """Each case's first calls and duplicates, ``rounds`` batches of ``calls`` after ``warm``
    of each; the times kept on the case."""
    for case in cases:
        case.first(f"{tag}dup")
        timed(case.first, [f"{tag}warm-{i}" for i in range(warm)])
        timed(case.duplicate, [f"{tag}dup"] * warm)
    for r in range(rounds):
        for case in random.Random(r).sample(cases, len(cases)):
            case.firsts += timed(case.first, [f"{tag}new-{r}-{i}" for i in range(calls)])
            case.duplicates += timed(case.duplicate, [f"{tag}dup"] * calls)


async def run_async(cases: list[ACase], calls: int, rounds: int, warm: int, tag: str = "a") -> None:
    for case in cases:
        await case.first(f"{tag}dup")
        await atimed(case.first, [f"{tag}warm-{i}" for i in range(warm)])
        await atimed(case.duplicate, [f"{tag}dup"] * warm)
    for r in range(rounds):
        for case in random.Random(r).sample(cases, len(cases)):
            case.firsts += await atimed(case.first, [f"{tag}new-{r}-{i}" for i in range(calls)])
            case.duplicates += await atimed(case.duplicate, [f"{tag}dup"] * calls)


Batch = Callable[[list[int]], Awaitable[None]]


async def interleaved(cases: list[tuple[str, Batch]], calls: int, rounds: int) -> dict[str, float]:
    """Each case's median over ``rounds`` of its per-call µs, the cases run interleaved, one
    batch of ``calls`` each per round, after a round 0 that warms up. Every batch gets numbers
    never handed out before."""
    numbers = iter(range(10**12))
    times: dict[str, list[float]] = {name: [] for name, _ in cases}
    for round_ in range(rounds + 1):
        for name, batch in cases:
            chunk = [next(numbers) for _ in range(calls)]
            gc.collect()
            start = time.perf_counter()
            await batch(chunk)
            if round_:
                times[name].append((time.perf_counter() - start) / calls * 1e6)
    return {name: statistics.median(values) for name, values in times.items()}
