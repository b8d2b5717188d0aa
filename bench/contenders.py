"""What the store cases measure: a contender's first call and duplicate, the result every
contender stores and replays, and a Guard as a contender."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from mideng import Guard

# An order confirmation of realistic size.
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
