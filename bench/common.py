"""Small timing helpers shared by the benchmarks: medians of many runs after a warm-up."""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from mideng import Guard


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


# -- shared by the store benchmarks ---------------------------------------------------------
# The result every contender stores and replays: an order confirmation of realistic size.
RESULT = {
    "order": "o-20260101-000001",
    "amount": "10.50",
    "currency": "CNY",
    "status": "paid",
    "coupon": "C-2026-0001",
}
Call = Callable[[str], object]
ACall = Callable[[str], Awaitable[object]]


@dataclass
class Case:
    """One contender: how it makes a first call and a duplicate, and what they took (µs)."""

    name: str
    first: Call
    duplicate: Call
    firsts: list[float] = field(default_factory=list)
    duplicates: list[float] = field(default_factory=list)


@dataclass
class ACase:
    name: str
    first: ACall
    duplicate: ACall
    firsts: list[float] = field(default_factory=list)
    duplicates: list[float] = field(default_factory=list)


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


# Contenders take turns in small batches, in a new order every round, so a noisy neighbour
# (another process, a checkpoint, a vacuum) slows all of them alike instead of whichever was
# running at the time. Every call's time is kept; a table shows medians.
def run_sync(cases: list[Case], calls: int, rounds: int, warm: int, tag: str = "") -> None:
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


def guard_case(name: str, guard: Guard) -> Case:
    def body() -> dict[str, str]:
        return RESULT

    def call(key: str) -> object:
        return guard.run("pay", key, body)

    return Case(name, call, call)


def aguard_case(name: str, guard: Guard) -> ACase:
    async def body() -> dict[str, str]:
        return RESULT

    async def call(key: str) -> object:
        return await guard.arun("pay", key, body)

    return ACase(name, call, call)


def case_table(
    title: str, cases: list[Case] | list[ACase], floor: Case | ACase | None
) -> list[str]:
    """A markdown table of the cases' medians and their ratios to ``floor``."""
    floor_first = statistics.median(floor.firsts) if floor else None
    floor_dup = statistics.median(floor.duplicates) if floor else None

    def ratio(value: float, base: float | None) -> str:
        return "-" if base is None else f"{value / base:.2f}"

    lines = [
        f"### {title}",
        "",
        "| contender | first call µs | x floor | duplicate µs | x floor |",
        "|---|---:|---:|---:|---:|",
    ]
    for case in cases:
        first, dup = statistics.median(case.firsts), statistics.median(case.duplicates)
        lines.append(
            f"| {case.name} | {first:.1f} | {ratio(first, floor_first)} | "
            f"{dup:.1f} | {ratio(dup, floor_dup)} |"
        )
    return [*lines, ""]


async def interleaved(
    cases: list[tuple[str, Callable[[list[int]], Awaitable[None]]]], calls: int, rounds: int
) -> dict[str, float]:
    """Each case's median over ``rounds`` of its per-call µs, the cases run interleaved, one
    batch of ``calls`` each per round (so a change in the machine's load hits them alike),
    after a round 0 that warms up. Every batch gets numbers never handed out before."""
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
