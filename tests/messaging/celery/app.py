"""The Celery app the worker processes of the Celery tests run, configured from the
environment the test sets: broker, queue, result backend, tables, a work directory.

``deduct_stock``'s first run writes ``started`` and sits until it is SIGKILLed; every later
run (once the test wrote ``killed``) takes a second, then writes one effect row. Every run
appends its pid to ``runs``.

``deduct_stock_in_tx`` (``engine=``) inserts its effect row on the task's connection, in the
dedup record's transaction, then does what ``MIDENG_CELERY_MODE`` says:

- ``hold``: writes ``started`` and waits for ``release`` before returning (and committing);
- ``kill_before_commit``: until ``killed`` exists, writes ``started`` and sits to be SIGKILLed;
- ``kill_after_commit``: returns; when the pool process that ran it gets the committed
  connection back (the pool's checkin, before the task's result is stored or its message
  acked), it writes ``committed`` and sits to be SIGKILLed, once;
- ``fail``: raises LookupError on its first two runs (autoretry_for retries it).

Every run appends its pid to ``runs``, every finished delivery of it a line to ``finished``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from celery import Celery  # type: ignore[import-untyped]
from celery.signals import task_postrun  # type: ignore[import-untyped]
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.pool import NullPool

from mideng import Guard
from mideng.guard.driver import Driver
from mideng.messaging.celery import idempotent_task
from mideng.stores.sql import SQLStore

env = os.environ
WORK = Path(env.get("MIDENG_CELERY_DIR", "."))
QUEUE = env.get("MIDENG_CELERY_QUEUE", "mideng-celery")

app = Celery("mideng_celery_test", broker=env.get("MIDENG_CELERY_BROKER"))
app.conf.update(
    result_backend=env.get("MIDENG_CELERY_BACKEND"),
    task_default_queue=QUEUE,
    task_default_exchange=env.get("MIDENG_CELERY_EXCHANGE", QUEUE),
    task_default_routing_key=QUEUE,
    worker_prefetch_multiplier=1,
    worker_enable_remote_control=False,
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
    result_expires=600,
)

_guards: dict[int, Driver] = {}


def guard() -> Driver:
    """One Guard per process: a pool child opens its own connections after the fork."""
    made = _guards.get(os.getpid())
    if made is None:
        store = SQLStore.from_url(
            env["MIDENG_CELERY_DB"], table=env["MIDENG_CELERY_RECORDS"], create_schema=False
        )
        made = _guards[os.getpid()] = Guard(store)
    return made


@idempotent_task(
    app, guard, "stock", key="order:{order_id}", in_flight_delay=0.5, policy={"lease": 2.0}
)
def deduct_stock(order_id: str, quantity: int) -> dict[str, object]:
    with (WORK / "runs").open("a") as runs:
        runs.write(f"{os.getpid()}\n")
    if not (WORK / "killed").exists():
        (WORK / "started").write_text(str(os.getpid()))
        time.sleep(120)  # killed long before this ends
        raise SystemExit("never killed")
    time.sleep(1.0)  # the other copies arrive meanwhile and find it in flight
    engine = create_engine(env["MIDENG_CELERY_DB"], poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    f"INSERT INTO {env['MIDENG_CELERY_EFFECTS']} (order_key, pid) VALUES (:k, :p)"
                ),
                {"k": f"order:{order_id}", "p": os.getpid()},
            )
    finally:
        engine.dispose()
    return {"order": order_id, "deducted": quantity}


_engines: dict[int, Engine] = {}


def engine() -> Engine:
    """One Engine (and pool) per process, made in the pool child that uses it."""
    made = _engines.get(os.getpid())
    if made is None:
        made = _engines[os.getpid()] = create_engine(env["MIDENG_CELERY_DB"], pool_size=2)
        event.listen(made, "checkin", _after_commit)
    return made


MODE = env.get("MIDENG_CELERY_MODE", "")
#: Whether this process ran deduct_stock_in_tx's body (a replay does not).
RAN: list[bool] = []


def _park(marker: str) -> None:
    (WORK / marker).write_text(str(os.getpid()))
    time.sleep(120)  # killed long before this ends
    raise SystemExit("never killed")


@idempotent_task(
    app,
    guard,
    "stock-tx",
    key="order:{order_id}",
    engine=engine,
    in_flight_delay=0.5,
    autoretry_for=(LookupError,),
    max_retries=3,
    default_retry_delay=0.2,
)
def deduct_stock_in_tx(conn: Connection, order_id: str, quantity: int) -> dict[str, object]:
    with (WORK / "runs").open("a") as runs:
        runs.write(f"{os.getpid()}\n")
    RAN.append(True)
    conn.execute(
        text(f"INSERT INTO {env['MIDENG_CELERY_EFFECTS']} (order_key, pid) VALUES (:k, :p)"),
        {"k": f"order:{order_id}", "p": os.getpid()},
    )
    if MODE == "hold":
        (WORK / "started").write_text(str(os.getpid()))
        while not (WORK / "release").exists():
            time.sleep(0.05)
    elif MODE == "kill_before_commit" and not (WORK / "killed").exists():
        _park("started")
    elif MODE == "fail" and len((WORK / "runs").read_text().split()) <= 2:
        raise LookupError("no such product")
    return {"order": order_id, "deducted": quantity}


def _after_commit(*_: Any) -> None:
    if MODE == "kill_after_commit" and RAN and not (WORK / "killed").exists():
        _park("committed")


@task_postrun.connect  # type: ignore[untyped-decorator]
def _finished(task: Any = None, state: str | None = None, **_: Any) -> None:
    if task is not None and task.name == deduct_stock_in_tx.name and state == "SUCCESS":
        with (WORK / "finished").open("a") as finished:
            finished.write(f"{os.getpid()}\n")
