"""A body that is an object with ``async def __call__`` (or a partial over one) is an async
body everywhere a Guard takes one: ``run`` refuses it with the error naming ``arun``, ``arun``
and the decorator await it. Told apart as a sync body, ``run`` (and the sync wrapper the
decorator made for it) claimed the key, got an unawaited coroutine back and failed to store it
with a CodecError: the body never ran, and the error named the codec instead of the cause."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator

import pytest

from mideng import Guard
from mideng.errors import ConfigurationError
from mideng.stores.memory import MemoryStore


class Charge:
    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self, order: str) -> dict[str, str]:
        await asyncio.sleep(0)
        self.runs += 1
        return {"order": order, "status": "charged"}


@pytest.fixture
def guard() -> Iterator[Guard]:
    g = Guard(MemoryStore())
    yield g
    g.close()


@pytest.mark.parametrize("wrap", [lambda c: c, functools.partial], ids=["object", "partial"])
def test_run_refuses_an_async_callable_object_and_arun_awaits_it(
    guard: Guard, wrap: object
) -> None:
    charge = Charge()
    body = wrap(charge)  # type: ignore[operator]
    with pytest.raises(ConfigurationError, match="arun"):
        guard.run("pay", "order:1", body, "order:1")
    assert charge.runs == 0
    assert guard.get("pay", "order:1") is None  # refused before any claim

    async def twice() -> list[object]:
        return [await guard.arun("pay", "order:1", body, "order:1") for _ in range(2)]

    first, second = asyncio.run(twice())
    assert first == second == {"order": "order:1", "status": "charged"}
    assert charge.runs == 1


def test_the_decorator_makes_an_async_wrapper_for_an_async_callable_object(guard: Guard) -> None:
    charge = Charge()
    wrapped = guard.idempotent("pay", key="{order}")(charge)

    async def twice() -> list[object]:
        return [await wrapped(order="order:2") for _ in range(2)]

    assert asyncio.run(twice()) == [{"order": "order:2", "status": "charged"}] * 2
    assert charge.runs == 1
