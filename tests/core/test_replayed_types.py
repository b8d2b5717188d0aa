"""A replay rebuilds the value the first call returned, of the type it had, for return types
JSON can't name: a union of dataclasses or models (the member that stored it, not the first
that accepts its keys), a NamedTuple (stored as a list) and a TypedDict (a dict class that
refuses isinstance checks). Before, a union replayed its first member filled from defaults,
and the other two raised CodecError on every replay."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, TypedDict

import pydantic
import pytest

from mideng import Guard
from mideng.core.codec import JsonCodec
from mideng.stores.memory import MemoryStore


@dataclasses.dataclass
class Paid:
    order: str
    amount: int = 0


@dataclasses.dataclass
class Declined:
    order: str
    reason: str


class Accepted(pydantic.BaseModel):
    order: str
    ref: str = ""


class Refused(pydantic.BaseModel):
    order: str
    why: str


class Point(NamedTuple):
    x: int
    label: Paid


class Totals(TypedDict):
    count: int
    last: Paid


CASES: list[tuple[Any, Any]] = [
    (Paid | Declined, Declined("o-1", "no funds")),
    (Paid | Declined, Paid("o-1", 5)),
    (Paid | Declined | None, Declined("o-1", "no funds")),
    (Accepted | Refused, Refused(order="o-2", why="limit")),
    (Accepted | Refused, Accepted(order="o-2", ref="r")),
    (Point, Point(1, Paid("o-3", 2))),
    (Point | None, Point(1, Paid("o-3", 2))),
    (tuple[Point, ...], (Point(1, Paid("o-3", 2)),)),
    (Totals, {"count": 2, "last": Paid("o-4", 9)}),
    (list[Totals], [{"count": 2, "last": Paid("o-4", 9)}]),
]


@pytest.mark.parametrize(("hint", "value"), CASES)
def test_the_codec_rebuilds_what_was_stored(hint: Any, value: Any) -> None:
    codec = JsonCodec()
    rebuilt = codec.decode(codec.encode(value), hint)
    assert rebuilt == value
    assert type(rebuilt) is type(value)


def test_a_duplicate_gets_the_union_member_the_first_call_returned() -> None:
    guard = Guard(MemoryStore())
    runs: list[str] = []

    def pay(order: str) -> Paid | Declined:
        runs.append(order)
        return Declined(order, "no funds")

    first = guard.run("replayed-types", "o-5", pay, "o-5")
    second = guard.run("replayed-types", "o-5", pay, "o-5")
    assert runs == ["o-5"]
    assert second == first
    assert type(second) is Declined
