"""The Celery app the worker processes of the Celery tests run, configured from the
environment the test sets: broker, queue, result backend, tables, a work directory.

``deduct_stock``'s first run writes ``started`` and sits until it is SIGKILLed; every later
run (once the test wrote ``killed``) takes a second, then writes one effect row. Every run
appends its pid to ``runs``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import Celery  # type: ignore[import-untyped]
from sqlalchemy import create_engine, text
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
