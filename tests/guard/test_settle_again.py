"""A settling write the store fails once is made again (mideng.guard.again), so the body that
ran is never run a second time because of it.

The store fails the first completion, failure record or release of a call, either before the
write (nothing landed) or after it (the write landed, its answer lost). Before, the caller got
StoreUnavailableError and the record stayed processing: a completion's duplicate met
InProgressError until the lease ran out and then took it over, running the body again; a
failure meant to be recorded was run again the same way. Every store, both drivers, metrics off
and on (the metered loops settle on their own paths).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mideng import Guard
from mideng.core.record import Status
from mideng.errors import StoreUnavailableError
from mideng.observability import metrics
from mideng.stores.base import Store
from tests.backends import Ctx, opened_store

OPS = {"complete": ("complete", "acomplete"), "fail": ("fail", "afail")}
OPS["release"] = ("release", "arelease")


def failing_once(store: Store, op: str, lost: bool) -> list[int]:
    """Make ``store`` fail its first ``op`` (sync or async) with StoreUnavailableError: before
    the write, or (``lost``) after it landed. Returns the count of failures made."""
    made: list[int] = []
    cls = type(store)
    names = OPS[op]

    def sync(self: Any, *args: Any) -> Any:
        if made:
            return getattr(cls, names[0])(self, *args)
        made.append(1)
        if lost:
            getattr(cls, names[0])(self, *args)
        raise StoreUnavailableError(f"{op} failed once (test)")

    async def asynchronous(self: Any, *args: Any) -> Any:
        if made:
            return await getattr(cls, names[1])(self, *args)
        made.append(1)
        if lost:
            await getattr(cls, names[1])(self, *args)
        raise StoreUnavailableError(f"{op} failed once (test)")

    store.__class__ = type(f"Once{cls.__name__}", (cls,), {names[0]: sync, names[1]: asynchronous})
    return made


@pytest.fixture(params=["memory", "sqlite", "redis", "postgresql"])
def store(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Store]:
    yield from opened_store(request.param, ctx)


@pytest.fixture(params=["plain", "metered"])
def metered(request: pytest.FixtureRequest) -> Iterator[bool]:
    if request.param == "metered":
        metrics.enable(CollectorRegistry())
        try:
            yield True
        finally:
            metrics.disable()
    else:
        yield False


def call(guard: Guard, mode: str, scope: str, key: str, body: Any) -> Any:
    if mode == "sync":
        return guard.run(scope, key, body)

    async def run() -> Any:
        return body()

    async def in_a_loop() -> Any:
        try:
            return await guard.arun(scope, key, run)
        finally:
            await guard.store.aclose()  # this loop's connections, before the loop ends

    return asyncio.run(in_a_loop())


@pytest.mark.parametrize("lost", [False, True], ids=["before", "lost-reply"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_completion_the_store_failed_once_is_made_again(
    store: Store, metered: bool, mode: str, lost: bool, caplog: pytest.LogCaptureFixture
) -> None:
    made = failing_once(store, "complete", lost)  # before the Guard, which metrics wrap
    guard, scope, key = Guard(store, lease=30), f"pay-{uuid.uuid4().hex[:6]}", "o1"
    runs: list[int] = []

    def body() -> dict[str, int]:
        runs.append(1)
        return {"paid": len(runs)}

    with caplog.at_level(logging.WARNING, logger="mideng"):
        assert call(guard, mode, scope, key, body) == {"paid": 1}
    assert made == [1]  # the store did fail it
    record = guard.get(scope, key)
    assert record is not None
    assert record.status is Status.SUCCEEDED
    assert call(guard, mode, scope, key, body) == {"paid": 1}  # replayed
    assert runs == [1]
    outcomes = [getattr(r, "mideng_outcome", None) for r in caplog.records]
    assert "settled_again" in outcomes


@pytest.mark.parametrize("lost", [False, True], ids=["before", "lost-reply"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_failure_record_the_store_failed_once_is_made_again(
    store: Store, metered: bool, mode: str, lost: bool
) -> None:
    """on_error="record": the failure is kept and replayed, the body not run again."""
    failing_once(store, "fail", lost)
    guard = Guard(store, lease=30, on_error="record")
    scope, key = f"pay-{uuid.uuid4().hex[:6]}", "o1"
    runs: list[int] = []

    def body() -> None:
        runs.append(1)
        raise ValueError("card declined")

    with pytest.raises(ValueError, match="card declined"):
        call(guard, mode, scope, key, body)
    record = guard.get(scope, key)
    assert record is not None
    assert record.status is Status.FAILED
    with pytest.raises(ValueError, match="card declined"):  # replayed, not run
        call(guard, mode, scope, key, body)
    assert runs == [1]


@pytest.mark.parametrize("lost", [False, True], ids=["before", "lost-reply"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_release_the_store_failed_once_is_made_again(
    store: Store, metered: bool, mode: str, lost: bool
) -> None:
    """The body's error is what the caller gets, and the key is free at once for its retry
    (left processing, the retry met InProgressError for the whole lease)."""
    failing_once(store, "release", lost)
    guard, scope, key = Guard(store, lease=30), f"pay-{uuid.uuid4().hex[:6]}", "o1"
    runs: list[int] = []

    def body() -> str:
        runs.append(1)
        if len(runs) == 1:
            raise ValueError("gateway down")
        return "paid"

    with pytest.raises(ValueError, match="gateway down"):
        call(guard, mode, scope, key, body)
    assert guard.get(scope, key) is None
    assert call(guard, mode, scope, key, body) == "paid"
    assert runs == [1, 1]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_store_down_for_longer_still_leaves_its_error(store: Store, mode: str) -> None:
    """Past the window the error stands, as before: the caller gets StoreUnavailableError."""
    guard, scope = Guard(store, lease=0.6), f"pay-{uuid.uuid4().hex[:6]}"
    cls = type(store)

    def down(self: Any, *args: Any) -> Any:
        raise StoreUnavailableError("down (test)")

    async def adown(self: Any, *args: Any) -> Any:
        raise StoreUnavailableError("down (test)")

    store.__class__ = type(f"Down{cls.__name__}", (cls,), {"complete": down, "acomplete": adown})
    with pytest.raises(StoreUnavailableError, match="down"):
        call(guard, mode, scope, "o1", lambda: 1)
