"""A scripted run against a real store, then a scrape: exactly the counts the script made."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from mideng import Guard, open_store
from mideng.core.record import Claim, ClaimRequest
from mideng.errors import (
    InProgressError,
    LeaseLostError,
    PayloadMismatchError,
    StoreUnavailableError,
)
from mideng.observability import metrics, observers
from mideng.stores.memory import MemoryStore
from tests.observability.scrape import samples, series


def order(n: int) -> dict[str, int]:
    return {"order": n}


@pytest.fixture(params=[True, False], ids=["durations", "counts"])
def either(request: pytest.FixtureRequest) -> Iterator[CollectorRegistry]:
    """Metrics on with durations, or counting only: the counters read the same."""
    reg = CollectorRegistry()
    metrics.enable(reg, durations=request.param)
    yield reg
    metrics.disable()


def test_a_scripted_run_scrapes_as_exactly_those_counts(
    tmp_path: Path, either: CollectorRegistry
) -> None:
    registry = either
    timed = metrics.enabled().durations  # type: ignore[union-attr]
    guard = Guard(open_store(f"sqlite:///{tmp_path / 'm.db'}"))
    for n in range(5):  # 5 first calls
        assert guard.run("orders", f"o{n}", order, n, payload={"n": n}) == {"order": n}
    for n in [0, 1, 2, 3, 4, 0, 1]:  # 7 replays
        assert guard.run("orders", f"o{n}", order, 99, payload={"n": n}) == {"order": n}
    for _ in range(2):  # 2 mismatches
        with pytest.raises(PayloadMismatchError):
            guard.run("orders", "o3", order, 3, payload={"n": "other"})

    # A take-over and a fenced zombie write: the first holder's lease runs out while its body
    # is still running; a second caller takes the key over and finishes; then the first
    # holder's completion is refused.
    entered, resume = threading.Event(), threading.Event()
    zombie: list[BaseException] = []

    def slow() -> str:
        entered.set()
        assert resume.wait(10)
        return "late"

    def first_holder() -> None:
        try:
            guard.run("payments", "p1", slow, policy={"lease": 0.2, "heartbeat": False})
        except BaseException as exc:
            zombie.append(exc)

    holder = threading.Thread(target=first_holder)
    holder.start()
    assert entered.wait(10)
    taken = False
    while not taken:  # the lease runs out on the store's clock; try until it has
        try:
            guard.run("payments", "p1", lambda: "taken over", policy={"heartbeat": False})
            taken = True
        except InProgressError:
            continue
    resume.set()
    holder.join(10)
    assert len(zombie) == 1
    assert isinstance(zombie[0], LeaseLostError)
    in_progress = series(registry, "mideng_claims_total").get(
        (("outcome", "in_progress"), ("scope", "payments")), 0
    )

    claims = series(registry, "mideng_claims_total")
    assert claims == {
        (("outcome", "acquired"), ("scope", "orders")): 5,
        (("outcome", "replay"), ("scope", "orders")): 7,
        (("outcome", "mismatch"), ("scope", "orders")): 2,
        (("outcome", "acquired"), ("scope", "payments")): 2,
        **(
            {(("outcome", "in_progress"), ("scope", "payments")): in_progress}
            if in_progress
            else {}
        ),
    }
    assert series(registry, "mideng_takeovers_total") == {(("scope", "payments"),): 1}
    assert series(registry, "mideng_fenced_writes_total") == {
        (("operation", "complete"), ("scope", "payments")): 1
    }
    assert series(registry, "mideng_store_errors_total") == {}
    if not timed:
        assert series(registry, "mideng_body_seconds_count") == {}
        assert series(registry, "mideng_store_call_seconds_count") == {}
        guard.close()
        return
    # Bodies: 5 orders and 2 payments ran; store calls: one claim per claim answered.
    bodies = series(registry, "mideng_body_seconds_count")
    assert bodies == {(("scope", "orders"),): 5, (("scope", "payments"),): 2}
    calls = series(registry, "mideng_store_call_seconds_count")
    assert calls[(("operation", "claim"), ("scope", "orders"))] == 14
    assert calls[(("operation", "complete"), ("scope", "orders"))] == 5
    # The fenced completion failed, so only the take-over's completion was timed.
    assert calls[(("operation", "complete"), ("scope", "payments"))] == 1
    guard.close()


class Down(MemoryStore):
    """A store whose claims fail as unavailable."""

    def claim(self, req: ClaimRequest) -> Claim:
        raise StoreUnavailableError("down")


def test_store_errors_and_fail_open_runs_are_counted(registry: CollectorRegistry) -> None:
    guard = Guard(Down())
    with pytest.raises(StoreUnavailableError):
        guard.run("stock", "s1", lambda: 1)
    assert guard.run("stock", "s1", lambda: 2, policy={"fail_open": True}) == 2
    assert series(registry, "mideng_store_errors_total") == {
        (("operation", "claim"), ("store", "memory")): 2
    }
    assert series(registry, "mideng_fail_open_runs_total") == {
        (("scope", "stock"), ("step", "claim")): 1
    }


@pytest.mark.anyio
async def test_async_calls_are_counted_the_same(registry: CollectorRegistry) -> None:
    guard = Guard(open_store("memory://"))

    async def pay(n: int) -> int:
        return n

    assert await guard.arun("pay", "k", pay, 1) == 1
    assert await guard.arun("pay", "k", pay, 2) == 1
    assert series(registry, "mideng_claims_total") == {
        (("outcome", "acquired"), ("scope", "pay")): 1,
        (("outcome", "replay"), ("scope", "pay")): 1,
    }
    assert series(registry, "mideng_body_seconds_count") == {(("scope", "pay"),): 1}


def test_off_means_off_and_the_guard_sees_its_own_store(tmp_path: Path) -> None:
    reg = CollectorRegistry()
    store = open_store("memory://")
    guard = Guard(store)
    metrics.enable(reg)
    assert metrics.enable(reg) is metrics.enabled()  # enabling twice is one collector
    guard.run("stock", uuid.uuid4().hex, lambda: 1)
    assert guard.store is store  # observation never replaces what the Guard holds
    metrics.disable()
    assert observers.on is None
    guard.run("stock", "after", lambda: 1)
    assert not any(name.startswith("mideng_") for name, _ in samples(reg))


def test_heartbeat_failures_are_counted(registry: CollectorRegistry) -> None:
    from mideng.observability import logs

    class Ticket:
        scope, key, fence = "stock", "s1", 3

    logs.heartbeat_failed(Ticket(), RuntimeError("x"), 1, 1.0, 0.1)
    logs.heartbeat_failed(Ticket(), RuntimeError("x"), 2, 1.0, 0.1)
    assert series(registry, "mideng_heartbeat_failures_total") == {(("scope", "stock"),): 2}


def test_counts_stay_exact_across_many_threads(registry: CollectorRegistry) -> None:
    """Each thread records into its own shard: none of 8 x 300 calls is lost or doubled."""
    guard = Guard(open_store("memory://"))
    start = threading.Barrier(8)

    def caller(t: int) -> None:
        start.wait()
        for n in range(300):
            guard.run("stock", f"t{t}-{n % 100}", order, n)  # 100 first calls, 200 replays

    threads = [threading.Thread(target=caller, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert series(registry, "mideng_claims_total") == {
        (("outcome", "acquired"), ("scope", "stock")): 800,
        (("outcome", "replay"), ("scope", "stock")): 1600,
    }
    assert series(registry, "mideng_body_seconds_count") == {(("scope", "stock"),): 800}


def test_metrics_and_tracing_together_count_once(registry: CollectorRegistry) -> None:
    from mideng.observability import tracing
    from tests.observability.otel import MemoryTracerProvider

    provider = MemoryTracerProvider()
    tracing.enable(provider)
    guard = Guard(open_store("memory://"))
    guard.run("stock", "s-1", lambda: 1)
    guard.run("stock", "s-1", lambda: 1)
    assert len(provider.named("mideng.call")) == 2
    assert series(registry, "mideng_claims_total") == {
        (("outcome", "acquired"), ("scope", "stock")): 1,
        (("outcome", "replay"), ("scope", "stock")): 1,
    }


def test_counts_without_durations() -> None:
    reg = CollectorRegistry()
    metrics.enable(reg, durations=False)
    guard = Guard(Down())
    guard.run("stock", "s-1", lambda: 1, policy={"fail_open": True})
    guard = Guard(open_store("memory://"))
    guard.run("stock", "s-1", lambda: 1)
    guard.run("stock", "s-1", lambda: 1)
    assert series(reg, "mideng_claims_total") == {
        (("outcome", "acquired"), ("scope", "stock")): 1,
        (("outcome", "replay"), ("scope", "stock")): 1,
    }
    assert series(reg, "mideng_store_errors_total") == {
        (("operation", "claim"), ("store", "memory")): 1
    }
    assert series(reg, "mideng_store_call_seconds_count") == {}
    assert series(reg, "mideng_body_seconds_count") == {}
