"""The retry of a delivery whose key is held elsewhere leaves the task's own retry limit as it
was. Celery keeps a ``max_retries`` given to ``task.retry`` on the task object, which a worker
process shares between all the deliveries it runs, and its ``autoretry_for`` takes that value
for the next body error, whatever delivery it is: a limit of 1 left there by an in-flight
retry gave up on a later task on its second run, though it was configured to retry 3 times."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from mideng import Guard
from mideng.messaging.celery import idempotent_task
from mideng.stores.memory import MemoryStore


class OutOfStock(Exception):
    pass


@pytest.fixture
def worker_app() -> Iterator[Any]:
    """Not eager: a retry is sent (to the in-memory broker) and raised, as in a worker."""
    from celery import Celery  # type: ignore[import-untyped]

    made = Celery("mideng_in_flight_limit", broker="memory://", backend="cache+memory://")
    yield made
    made.close()


def run_as_worker(task: Any, retries: int, *args: Any) -> None:
    """What a worker does with one delivery: the task's request, then its run."""
    task.push_request(
        id=f"delivery-{retries}-{args}",
        args=list(args),
        kwargs={},
        retries=retries,
        called_directly=False,
        is_eager=False,
        delivery_info={},
    )
    try:
        task.run(*args)
    finally:
        task.pop_request()


def test_an_in_flight_retry_leaves_the_retry_limit_of_later_deliveries(worker_app: Any) -> None:
    from celery.exceptions import Retry  # type: ignore[import-untyped]

    guard = Guard(MemoryStore(), lease=30)
    runs: list[str] = []

    @idempotent_task(
        worker_app,
        guard,
        "stock",
        key="order:{order_id}",
        in_flight_delay=0.5,
        autoretry_for=(OutOfStock,),
        max_retries=3,
    )
    def deduct(order_id: str) -> str:
        runs.append(order_id)
        raise OutOfStock(order_id)

    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        def body() -> None:
            holding.set()
            release.wait(10)

        guard.run("stock", "order:1001", body)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        with pytest.raises(Retry):  # held elsewhere: back later, on its first delivery
            run_as_worker(deduct, 0, "1001")
    finally:
        release.set()
        holder.join(10)
    assert runs == []

    # Another task, in the same worker process, on its second run of the three retries it has.
    with pytest.raises(Retry):
        run_as_worker(deduct, 1, "2002")
    assert runs == ["2002"]
