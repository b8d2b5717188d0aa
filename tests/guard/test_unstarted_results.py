"""A body whose result is work that never started: a sync body returning a coroutine
(``lambda: charge(order)`` given to ``run``), a generator function, an async body missing an
``await``. Before, the result failed to encode, so the claim was recorded as failed with a
CodecError: the work never ran, every retry got that CodecError for the record's whole
retention, and the coroutine was never awaited. Now the claim is released and the call raises
a ConfigurationError saying what happened; a retry written correctly runs the work once."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mideng import Guard
from mideng.errors import CodecError, ConfigurationError
from mideng.stores.base import Store
from mideng.stores.memory import MemoryStore
from tests.backends import Ctx, opened_store
from tests.guard.gates import run_closing

SCOPE = "unstarted-results"


class Charges:
    def __init__(self) -> None:
        self.runs: list[str] = []

    async def charge(self, order: str) -> str:
        await asyncio.sleep(0)
        self.runs.append(order)
        return f"charged {order}"

    def lines(self, order: str) -> Iterator[str]:
        self.runs.append(order)
        yield order


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Store]:
    yield from opened_store(request.param, ctx)


@pytest.fixture(params=["off", "on"])
def metrics(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.param == "off":
        yield
        return
    request.getfixturevalue("registry")
    yield


def _refused(call: Callable[[], Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a coroutine left unawaited warns when it is collected
        with pytest.raises(ConfigurationError, match="never ran"):
            call()


@pytest.mark.parametrize("on_error", ["release", "record", "retry"])
def test_a_sync_body_returning_unstarted_work_releases_its_key(
    store: Store, metrics: None, on_error: str
) -> None:
    guard = Guard(store, on_error=on_error)
    charges = Charges()
    key = f"sync-{on_error}-{id(charges)}"
    _refused(lambda: guard.run(SCOPE, key, lambda: charges.charge("o-1")))
    _refused(lambda: guard.run(SCOPE, key + "-gen", charges.lines, "o-2"))
    assert charges.runs == []
    assert guard.get(SCOPE, key) is None
    assert guard.get(SCOPE, key + "-gen") is None
    assert guard.run(SCOPE, key + "-gen", lambda: "fixed") == "fixed"


@pytest.mark.parametrize("on_error", ["release", "record"])
def test_an_async_body_missing_an_await_releases_its_key(
    store: Store, metrics: None, on_error: str
) -> None:
    guard = Guard(store, on_error=on_error)
    charges = Charges()
    key = f"async-{on_error}-{id(charges)}"

    async def forgot(order: str) -> str:
        return charges.charge(order)  # type: ignore[return-value]

    async def scenario() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(ConfigurationError, match="never ran"):
                await guard.arun(SCOPE, key, forgot, "o-3")
        assert await guard.aget(SCOPE, key) is None
        assert await guard.arun(SCOPE, key, charges.charge, "o-3") == "charged o-3"
        assert await guard.arun(SCOPE, key, charges.charge, "o-3") == "charged o-3"

    run_closing(store, scenario)
    assert charges.runs == ["o-3"]


def test_the_decorator_releases_too() -> None:
    guard = Guard(MemoryStore())
    charges = Charges()

    @guard.idempotent(SCOPE, key="{order}")
    def pay(order: str) -> Any:
        return charges.charge(order)

    _refused(lambda: pay("o-4"))
    assert guard.get(SCOPE, "o-4") is None
    assert charges.runs == []


def test_a_result_that_is_running_work_is_still_recorded() -> None:
    """A generator the body already advanced did run: its failure is recorded as before."""
    guard = Guard(MemoryStore(), on_error="record")
    charges = Charges()

    def started() -> Iterator[str]:
        lines = charges.lines("o-5")
        next(lines)
        return lines

    for _ in range(2):
        with pytest.raises(CodecError):
            guard.run(SCOPE, "started", started)
    assert charges.runs == ["o-5"]
