"""idempotent_task in process: the key it requires, a key held elsewhere turned into a retry
with a bounded countdown that never exhausts, the Celery settings it defaults, the task's
name. (A second send returning the first run's result, a send checked against the function's
arguments: the Celery suite's, tests/messaging/celery/test_suite.py.)"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from mideng import Guard
from mideng.errors import ConfigurationError
from mideng.messaging.celery import idempotent_task
from mideng.stores.memory import MemoryStore


def test_a_key_is_required_and_delays_are_checked(app: Any) -> None:
    guard = Guard(MemoryStore())
    with pytest.raises(ConfigurationError, match="needs key="):
        idempotent_task(app, guard, "stock", key=None)
    with pytest.raises(ConfigurationError, match="in_flight_delay"):
        idempotent_task(app, guard, "stock", key="order:{order_id}", in_flight_delay=0)


def test_settings_default_to_late_acks_and_reject_on_worker_lost(app: Any) -> None:
    guard = Guard(MemoryStore())

    @idempotent_task(app, guard, "stock", key="order:{order_id}", rate_limit="10/s")
    def deduct(order_id: str) -> None:
        return None

    assert (deduct.acks_late, deduct.reject_on_worker_lost, deduct.rate_limit) == (
        True,
        True,
        "10/s",
    )
    assert deduct.name == "tests.messaging.celery.test_task.deduct"  # as Celery names any task


def test_a_script_and_the_worker_importing_it_agree_on_the_name(app: Any) -> None:
    def deduct(order_id: str) -> None:
        return None

    deduct.__module__ = "__main__"  # ``python tasks.py`` sending: named after the app's main
    task = idempotent_task(app, Guard(MemoryStore()), "stock", key="order:{order_id}")(deduct)
    assert task.name == "mideng_task_test.deduct"


def test_a_key_held_elsewhere_becomes_a_retry(app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    guard = Guard(MemoryStore(), lease=30)
    release = threading.Event()
    holding = threading.Event()
    runs: list[str] = []

    @idempotent_task(app, guard, "stock", key="order:{order_id}", in_flight_delay=0.5)
    def deduct(order_id: str) -> str:
        runs.append(order_id)
        return order_id

    def hold() -> None:
        def body() -> str:
            holding.set()
            release.wait(10)
            return "1001"

        guard.run("stock", "order:1001", body)

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(10)
    asked: list[dict[str, Any]] = []

    class Retried(Exception):
        pass

    def retry(**options: Any) -> Exception:
        asked.append(options)
        return Retried()

    monkeypatch.setattr(deduct, "retry", retry)
    try:
        with pytest.raises(Retried):
            deduct.apply(args=["1001"], throw=True)
    finally:
        release.set()
        holder.join(10)
    assert runs == []  # never run beside the holder
    assert asked[0]["countdown"] == 0.5  # the lease left is 30 s; capped at in_flight_delay
    assert asked[0]["max_retries"] == 1  # always one more: this retry never exhausts
    assert type(asked[0]["exc"]).__name__ == "InProgressError"
    monkeypatch.undo()
    assert deduct.delay("1001").get() == "1001"  # the holder's result, replayed
    assert runs == []


class AsyncDeduct:
    async def __call__(self, order_id: str) -> None: ...


def test_an_async_body_is_refused_at_import_not_left_unawaited(app: Any) -> None:
    # Celery keeps what a body returns: an async one would hand back a coroutine nobody awaits.
    guard = Guard(MemoryStore())
    task = idempotent_task(app, guard, "stock", key="order:{order_id}")
    with pytest.raises(ConfigurationError, match="task body is sync"):

        @task
        async def deduct(order_id: str) -> None: ...

    with pytest.raises(ConfigurationError, match="task body is sync"):
        task(AsyncDeduct())
