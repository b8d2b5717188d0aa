"""What an operation costs the store, counted: a resumed operation reads all its finished
steps back in one round trip, and a step that runs adds one write."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from mideng import Guard
from mideng.core.record import Ticket
from mideng.stores.steps import StepStore
from tests.backends import Ctx, Opened
from tests.operations.processes import open_backend


@pytest.fixture(params=["postgresql", "mysql", "redis", "sqlite"])
def server(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Opened]:
    yield from open_backend(request.param, ctx)


def _count_round_trips(store: Any, counter: Counter[str]) -> None:
    """Count what reaches the server: statements on the SQL executor's cursor (each one
    round trip, ``;``-joined texts included), commands on Redis, statements on SQLite."""
    if hasattr(store, "executor"):
        execute = store.executor.execute
        store.executor.execute = lambda cur, stmt: (counter.update(["trip"]), execute(cur, stmt))[1]
    elif hasattr(store, "_send"):
        send = store._send
        store._send = lambda conn, args: (counter.update(["trip"]), send(conn, args))[1]
    else:
        conn = store._conn()
        store._conn = lambda: _Counting(conn, counter)


class _Counting:
    def __init__(self, conn: Any, counter: Counter[str]) -> None:
        self.conn, self.counter = conn, counter

    def execute(self, *args: Any) -> Any:
        self.counter.update(["trip"])
        return self.conn.execute(*args)


def _count_store_calls(store: Any, counter: Counter[str]) -> None:
    for name in ("claim", "begin_steps", "record_step", "complete", "clear_steps", "release"):
        method = getattr(store, name)
        setattr(
            store,
            name,
            lambda *a, _m=method, _n=name, **k: (counter.update([_n]), _m(*a, **k))[1],
        )


def test_a_resume_reads_every_finished_step_in_one_round_trip(server: Opened) -> None:
    store = server.store
    assert isinstance(store, StepStore)
    guard, scope = Guard(store, lease=30, heartbeat=False), f"pay-{uuid.uuid4().hex[:6]}"
    fail = [True]

    def effect(name: str) -> Any:
        @guard.step(name)
        def run() -> str:
            if name == "send_sms" and fail[0]:
                raise RuntimeError("sms gateway down")
            return name

        return run

    steps = [effect(n) for n in ("mark_paid", "issue_coupon", "add_points", "send_sms")]

    @guard.operation(scope, key="{order}")
    def pay(order: str) -> list[str]:
        return [step() for step in steps]

    with pytest.raises(RuntimeError):
        pay("o1")
    fail[0] = False
    # Only the resume read itself, with three finished steps to read.
    trips: Counter[str] = Counter()
    record = store.claim(guard.prepare(scope, "o1", pay, None).request())
    assert record.acquired
    _count_round_trips(store, trips)
    found = store.begin_steps(scope, "o1", record.record.owner, b"{}", "json")
    assert len(found) == 3
    expected = 2 if server.url is not None and server.url.startswith("sqlite") else 1
    assert trips["trip"] == expected  # SQLite: two local statements, no server in between
    store.release(Ticket.of(record.record))


def test_a_resumed_operation_pays_one_write_per_step_that_runs(server: Opened) -> None:
    store = server.store
    guard, scope = Guard(store, lease=30, heartbeat=False), f"pay-{uuid.uuid4().hex[:6]}"
    fail = [True]

    @guard.step("mark_paid")
    def mark_paid() -> str:
        return "paid"

    @guard.step("send_sms")
    def send_sms() -> str:
        if fail[0]:
            raise RuntimeError("sms gateway down")
        return "sent"

    @guard.operation(scope, key="{order}")
    def pay(order: str) -> list[str]:
        return [mark_paid(), mark_paid(), mark_paid(), send_sms()]

    calls: Counter[str] = Counter()
    _count_store_calls(store, calls)
    with pytest.raises(RuntimeError):
        pay("o1")
    assert calls == {"claim": 1, "begin_steps": 1, "record_step": 3, "release": 1}
    calls.clear()
    fail[0] = False
    assert pay("o1") == ["paid", "paid", "paid", "sent"]
    # Three finished steps cost nothing more than the one read in begin_steps.
    assert calls == {
        "claim": 1,
        "begin_steps": 1,
        "record_step": 1,
        "complete": 1,
        "clear_steps": 1,
    }
