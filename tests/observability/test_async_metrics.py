"""Awaited calls with metrics on: exactly the counts and durations the calls made."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from mideng import Guard
from mideng.errors import PayloadMismatchError
from mideng.observability import metrics
from tests.observability.scrape import series
from tests.observability.test_counted import AsyncFlaky, Clock

STORE_PAUSE = 0.05  # each store call of the test's store awaits this long
BODY_PAUSE = 0.01  # and each body this long


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    reg = CollectorRegistry()
    metrics.enable(reg)
    yield reg
    metrics.disable()


async def order(n: int) -> dict[str, int]:
    await asyncio.sleep(BODY_PAUSE)
    return {"order": n}


@pytest.mark.anyio
async def test_awaited_calls_count_each_claim_and_time_each_store_call(
    registry: CollectorRegistry,
) -> None:
    store = AsyncFlaky(Clock())
    store.pause = STORE_PAUSE
    guard = Guard(store, heartbeat=False)
    for n in range(3):  # 3 first calls
        assert await guard.arun("orders", f"o{n}", order, n, payload={"n": n}) == {"order": n}
    for n in [0, 1, 2, 0]:  # 4 replays
        assert await guard.arun("orders", f"o{n}", order, 9, payload={"n": n}) == {"order": n}
    with pytest.raises(PayloadMismatchError):  # 1 mismatch
        await guard.arun("orders", "o1", order, 1, payload={"n": "other"})

    assert series(registry, "mideng_claims_total") == {
        (("outcome", "acquired"), ("scope", "orders")): 3,
        (("outcome", "replay"), ("scope", "orders")): 4,
        (("outcome", "mismatch"), ("scope", "orders")): 1,
    }
    assert series(registry, "mideng_store_call_seconds_count") == {
        (("operation", "claim"), ("scope", "orders")): 8,
        (("operation", "complete"), ("scope", "orders")): 3,
    }
    assert series(registry, "mideng_body_seconds_count") == {(("scope", "orders"),): 3}
    # Each store call awaited STORE_PAUSE and each body BODY_PAUSE: the durations are
    # theirs (the lower bounds), and a body's excludes its claim and its completion (it
    # would be at least 3 x (2 x STORE_PAUSE + BODY_PAUSE) = 0.33 s in all if it did not).
    took = series(registry, "mideng_store_call_seconds_sum")
    claims = took[(("operation", "claim"), ("scope", "orders"))]
    completes = took[(("operation", "complete"), ("scope", "orders"))]
    assert claims >= 8 * STORE_PAUSE
    assert completes >= 3 * STORE_PAUSE
    body = series(registry, "mideng_body_seconds_sum")[(("scope", "orders"),)]
    assert 3 * BODY_PAUSE <= body < 0.3


@pytest.mark.anyio
async def test_an_awaited_body_that_raises_is_timed_and_its_release_counted(
    registry: CollectorRegistry,
) -> None:
    store = AsyncFlaky(Clock())
    guard = Guard(store, heartbeat=False)

    async def fails() -> None:
        raise ValueError("no")

    for _ in range(2):  # released each time, so both claims acquire
        with pytest.raises(ValueError, match="no"):
            await guard.arun("stock", "s1", fails)
    assert series(registry, "mideng_claims_total") == {
        (("outcome", "acquired"), ("scope", "stock")): 2
    }
    assert series(registry, "mideng_store_call_seconds_count") == {
        (("operation", "claim"), ("scope", "stock")): 2,
        (("operation", "release"), ("scope", "stock")): 2,
    }
    assert series(registry, "mideng_body_seconds_count") == {(("scope", "stock"),): 2}
