"""Metrics count what a guarded call did, and only observe it.

One script of every path a call can take (first call, replay, mismatch, each settling, a
take-over, a fenced write, an unresolved record, store errors at each step, fail-open runs, a
store raising something else), sync and awaited, runs with metrics off and on. What the
caller sees must be the same both ways; what a scrape reads must be exactly ``EXPECTED``: the
counts of each path the script takes (with durations; without them, the same counters and no
histogram).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mideng import Guard
from mideng.core.record import Claim, ClaimRequest, Record, Ticket
from mideng.errors import LeaseLostError, StoreUnavailableError
from mideng.guard.guard import Guard as PlainGuard
from mideng.observability import metrics
from mideng.stores.memory import MemoryStore
from tests.observability.scrape import samples


class Clock:
    """The store's clock, moved by hand, and by ``tick`` on every read while it is set."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.tick = 0.0

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


class Flaky(MemoryStore):
    """A memory store on a hand-moved clock whose operations raise what ``failing`` holds."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.failing: dict[str, BaseException] = {}

    def _maybe(self, operation: str) -> None:
        exc = self.failing.get(operation)
        if exc is not None:
            raise exc

    def claim(self, req: ClaimRequest) -> Claim:
        self._maybe("claim")
        return super().claim(req)

    def complete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Record:
        self._maybe("complete")
        return super().complete(ticket, result, codec, ttl)

    def fail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        self._maybe("fail")
        return super().fail(ticket, error, ttl)

    def release(self, ticket: Ticket) -> None:
        self._maybe("release")
        super().release(ticket)


class AsyncFlaky(Flaky):
    """``Flaky`` with async operations of its own, as a networked store's are (an embedded
    store's run its sync ones): each awaits ``pause`` seconds, then runs the class's sync
    operation."""

    offload_reason = ""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.pause = 0.0

    async def aclaim(self, req: ClaimRequest) -> Claim:
        await asyncio.sleep(self.pause)
        return Flaky.claim(self, req)

    async def acomplete(
        self, ticket: Ticket, result: bytes, codec: str, ttl: float | None
    ) -> Record:
        await asyncio.sleep(self.pause)
        return Flaky.complete(self, ticket, result, codec, ttl)

    async def afail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        await asyncio.sleep(self.pause)
        return Flaky.fail(self, ticket, error, ttl)

    async def arelease(self, ticket: Ticket) -> None:
        await asyncio.sleep(self.pause)
        Flaky.release(self, ticket)

    async def aheartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        await asyncio.sleep(self.pause)
        return Flaky.heartbeat(self, ticket, lease, ttl)


def boom() -> None:
    raise ValueError("boom")


async def aboom() -> None:
    raise ValueError("boom")


async def adict(**kw: Any) -> dict[str, Any]:
    return dict(kw)


def script() -> list[tuple[str, Any]]:
    """Every path, in order; what each call returned or raised."""
    clock = Clock()
    store = Flaky(clock)
    guard = Guard(store, heartbeat=False)
    seen: list[tuple[str, Any]] = []

    def call(scope: str, key: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> None:
        try:
            seen.append(("returned", guard.run(scope, key, fn, *args, **kw)))
        except Exception as exc:
            seen.append(("raised", f"{type(exc).__name__}: {exc}"))

    call("orders", "o1", dict, n=1, payload={"n": 1})  # acquired, completed
    call("orders", "o1", dict, n=2, payload={"n": 1})  # replay
    call("orders", "o1", dict, n=3, payload={"n": 2})  # mismatch
    call("orders", "e1", boom)  # the body raises: released
    call("orders", "e2", boom, policy={"on_error": "record"})  # failed, kept
    call("orders", "e2", boom, policy={"on_error": "record"})  # the failure replayed

    def outlived() -> str:  # runs past its lease: a second call takes over, this one is fenced
        call("orders", "z1", dict)  # still in progress
        clock.now += 120
        call("orders", "z1", lambda: "taken over")
        return "late"

    call("orders", "z1", outlived)
    call("orders", "z1", dict)  # the take-over's result

    def waited_out() -> str:  # a second call polls until this one's lease runs out, takes over
        clock.tick = 25.0
        call("orders", "w1", lambda: "after polls", policy={"in_progress": "wait"})
        clock.tick = 0.0
        return "late"

    call("orders", "w1", waited_out, policy={"wait_timeout": 30})

    def died() -> int:  # the lease runs out on an operation whose expiry is unknown
        clock.now += 120
        call("charges", "c1", dict, policy={"on_expiry": "unknown"})
        return 1

    call("charges", "c1", died, policy={"on_expiry": "unknown"})

    down = StoreUnavailableError("down")
    for operation, body in (("claim", dict), ("complete", dict), ("release", boom)):
        store.failing = {operation: down}
        call("stock", f"{operation}-closed", body)
        call("stock", f"{operation}-open", body, policy={"fail_open": True})
    store.failing = {"fail": down}
    call("stock", "fail-closed", boom, policy={"on_error": "record"})
    call("stock", "fail-open", boom, policy={"on_error": "record", "fail_open": True})
    store.failing = {"complete": LeaseLostError("fenced")}
    call("stock", "fenced", dict)
    store.failing = {"claim": RuntimeError("not a store error")}
    call("stock", "odd", dict)
    store.failing = {}
    call("stock", "fine", dict)
    guard.close()
    return seen


async def ascript() -> list[tuple[str, Any]]:
    """``script``, awaited: the same paths in the same order through ``Guard.arun``."""
    clock = Clock()
    store = AsyncFlaky(clock)
    guard = Guard(store, heartbeat=False)
    seen: list[tuple[str, Any]] = []

    async def call(
        scope: str, key: str, fn: Callable[..., Awaitable[Any]], *args: Any, **kw: Any
    ) -> None:
        try:
            seen.append(("returned", await guard.arun(scope, key, fn, *args, **kw)))
        except Exception as exc:
            seen.append(("raised", f"{type(exc).__name__}: {exc}"))

    async def value(v: Any) -> Any:
        return v

    await call("orders", "o1", adict, n=1, payload={"n": 1})
    await call("orders", "o1", adict, n=2, payload={"n": 1})
    await call("orders", "o1", adict, n=3, payload={"n": 2})
    await call("orders", "e1", aboom)
    await call("orders", "e2", aboom, policy={"on_error": "record"})
    await call("orders", "e2", aboom, policy={"on_error": "record"})

    async def outlived() -> str:
        await call("orders", "z1", adict)
        clock.now += 120
        await call("orders", "z1", value, "taken over")
        return "late"

    await call("orders", "z1", outlived)
    await call("orders", "z1", adict)

    async def waited_out() -> str:
        clock.tick = 25.0
        await call("orders", "w1", value, "after polls", policy={"in_progress": "wait"})
        clock.tick = 0.0
        return "late"

    await call("orders", "w1", waited_out, policy={"wait_timeout": 30})

    async def died() -> int:
        clock.now += 120
        await call("charges", "c1", adict, policy={"on_expiry": "unknown"})
        return 1

    await call("charges", "c1", died, policy={"on_expiry": "unknown"})

    down = StoreUnavailableError("down")
    for operation, body in (("claim", adict), ("complete", adict), ("release", aboom)):
        store.failing = {operation: down}
        await call("stock", f"{operation}-closed", body)
        await call("stock", f"{operation}-open", body, policy={"fail_open": True})
    store.failing = {"fail": down}
    await call("stock", "fail-closed", aboom, policy={"on_error": "record"})
    await call("stock", "fail-open", aboom, policy={"on_error": "record", "fail_open": True})
    store.failing = {"complete": LeaseLostError("fenced")}
    await call("stock", "fenced", adict)
    store.failing = {"claim": RuntimeError("not a store error")}
    await call("stock", "odd", adict)
    store.failing = {}
    await call("stock", "fine", adict)
    await guard.aclose()
    return seen


@pytest.fixture(params=[True, False], ids=["durations", "counts"])
def durations(request: pytest.FixtureRequest) -> Iterator[bool]:
    yield request.param
    metrics.disable()


def counted(registry: CollectorRegistry) -> dict[Any, float]:
    """Every counter and every histogram's count (its sum and buckets are timings)."""
    return {
        (name, labels): value
        for (name, labels), value in samples(registry).items()
        if name.endswith(("_total", "_count"))
    }


EXPECTED: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {
    ("mideng_body_seconds_count", (("scope", "charges"),)): 1,
    ("mideng_body_seconds_count", (("scope", "orders"),)): 7,
    ("mideng_body_seconds_count", (("scope", "stock"),)): 8,
    ("mideng_claims_total", (("outcome", "acquired"), ("scope", "charges"))): 1,
    ("mideng_claims_total", (("outcome", "acquired"), ("scope", "orders"))): 7,
    ("mideng_claims_total", (("outcome", "acquired"), ("scope", "stock"))): 8,
    ("mideng_claims_total", (("outcome", "in_progress"), ("scope", "orders"))): 3,
    ("mideng_claims_total", (("outcome", "mismatch"), ("scope", "orders"))): 1,
    ("mideng_claims_total", (("outcome", "replay"), ("scope", "orders"))): 3,
    ("mideng_claims_total", (("outcome", "unresolved"), ("scope", "charges"))): 1,
    ("mideng_fail_open_runs_total", (("scope", "stock"), ("step", "claim"))): 1,
    ("mideng_fail_open_runs_total", (("scope", "stock"), ("step", "complete"))): 1,
    ("mideng_fenced_writes_total", (("operation", "complete"), ("scope", "charges"))): 1,
    ("mideng_fenced_writes_total", (("operation", "complete"), ("scope", "orders"))): 2,
    ("mideng_fenced_writes_total", (("operation", "complete"), ("scope", "stock"))): 1,
    ("mideng_store_call_seconds_count", (("operation", "claim"), ("scope", "charges"))): 2,
    ("mideng_store_call_seconds_count", (("operation", "claim"), ("scope", "orders"))): 14,
    ("mideng_store_call_seconds_count", (("operation", "claim"), ("scope", "stock"))): 8,
    ("mideng_store_call_seconds_count", (("operation", "complete"), ("scope", "charges"))): 0,
    ("mideng_store_call_seconds_count", (("operation", "complete"), ("scope", "orders"))): 3,
    ("mideng_store_call_seconds_count", (("operation", "complete"), ("scope", "stock"))): 1,
    ("mideng_store_call_seconds_count", (("operation", "fail"), ("scope", "orders"))): 1,
    ("mideng_store_call_seconds_count", (("operation", "fail"), ("scope", "stock"))): 0,
    ("mideng_store_call_seconds_count", (("operation", "release"), ("scope", "orders"))): 1,
    ("mideng_store_call_seconds_count", (("operation", "release"), ("scope", "stock"))): 0,
    ("mideng_store_errors_total", (("operation", "claim"), ("store", "memory"))): 2,
    ("mideng_store_errors_total", (("operation", "complete"), ("store", "memory"))): 7,
    ("mideng_store_errors_total", (("operation", "fail"), ("store", "memory"))): 7,
    ("mideng_store_errors_total", (("operation", "release"), ("store", "memory"))): 7,
    ("mideng_takeovers_total", (("scope", "orders"),)): 2,
}


def expected(durations: bool) -> dict[Any, float]:
    timed = ("mideng_body_seconds_count", "mideng_store_call_seconds_count")
    return {
        (name, labels): float(n)
        for (name, labels), n in EXPECTED.items()
        if durations or name not in timed
    }


@pytest.fixture(scope="module")
def unobserved() -> list[tuple[str, Any]]:
    """What the script's calls returned with metrics off: the same for every way they are on,
    so run once (each run sits out its store errors' retries, seconds of real time)."""
    return script()


@pytest.fixture(scope="module")
def unobserved_awaited() -> list[tuple[str, Any]]:
    """``unobserved`` for the awaited script."""
    return asyncio.run(ascript())


def test_metrics_count_every_path_and_change_no_answer(
    durations: bool, unobserved: list[tuple[str, Any]]
) -> None:
    off = unobserved
    registry = CollectorRegistry()
    metrics.enable(registry, durations=durations)
    on = script()
    got = counted(registry)  # before disable() unregisters the collector
    metrics.disable()
    assert on == off
    assert got == expected(durations)
    assert Guard.drive is PlainGuard.drive  # observed, not replaced


@pytest.mark.anyio
async def test_metrics_count_every_awaited_path_and_change_no_answer(
    durations: bool, unobserved_awaited: list[tuple[str, Any]]
) -> None:
    off = unobserved_awaited
    registry = CollectorRegistry()
    metrics.enable(registry, durations=durations)
    on = await ascript()
    got = counted(registry)
    metrics.disable()
    assert on == off
    assert got == expected(durations)
    assert Guard.adrive is PlainGuard.adrive
