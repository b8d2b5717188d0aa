"""A consumer process for every broker's storm and crash tests: one broker adapter
(``config["broker"]``, a broker of mideng.messaging.brokers) feeding an IdempotentConsumer.

``python -m tests.helpers.storm_worker CONFIG.json``. ``mode`` is ``transactional`` (the
handler writes one effect row in the dedup record's transaction, on PostgreSQL or MariaDB),
``store`` (a Redis store; the handler counts its runs in a Redis hash) or ``operation`` (an
OperationConsumer running a three-step operation per message, on PostgreSQL or MariaDB).
SIGTERM sets the adapter's stop event (exit 0 once it returned); ``config["ready"]`` is
written once that handler is in place. Every handler run appends its key to
``config["runs"]`` when given (one line, O_APPEND) before it writes, so the parent counts
runs that did not commit as well.
With ``crash`` set, the process stops dead on one key so the parent can SIGKILL it there:
``before_commit`` inside the handler, after its insert and before the transaction commits;
``after_commit`` once the transaction committed, before the adapter settles (acks) the
message; ``between_steps`` (mode ``operation``) after the ``sms`` step, before ``coupon``.
It writes ``crash["marker"]`` when it is there.

A worker that has not exited ``config["hang_dump"]`` seconds (``HANG_DUMP`` unless given)
after SIGTERM writes every thread's stack and every asyncio task's await chain to its log
(stderr), so a stop that hangs names its place. A slot's incarnations share one log: each
begins with a ``--- pid N started`` line and one that stopped on SIGTERM ends with how long
that took.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import os
import random
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mideng import Guard, open_store
from mideng.messaging import IdempotentConsumer, Message, OperationConsumer, Verdict
from mideng.messaging.brokers import adapter
from mideng.messaging.headers import IDEMPOTENCY_KEY

#: How long a crash point waits to be killed before giving up (the parent kills in far less).
PARKED = 120.0
#: Seconds after SIGTERM before a worker still running dumps its stacks (the parent waits 30).
HANG_DUMP = 20.0


def mark(path: Path) -> None:
    path.write_text(str(os.getpid()))


def note_run(path: str | None, key: str) -> None:
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{key}\n".encode())
        finally:
            os.close(fd)


class StopsAfterCommit:
    """The consumer, but parked after the key's transaction committed, before the ack."""

    def __init__(self, inner: IdempotentConsumer, key: str, marker: Path) -> None:
        self.inner, self.key, self.marker = inner, key, marker
        # What an adapter reads of it: the lease; whether it is transactional (Redis Streams
        # decides one batch at a time then).
        self.policy, self.engine = inner.policy, inner.engine

    async def _park_if(self, message: Message) -> None:
        if message.headers.get(IDEMPOTENCY_KEY) == self.key:
            mark(self.marker)
            await asyncio.sleep(PARKED)
            raise SystemExit("never killed after the commit")

    async def handle(self, message: Message) -> Verdict:
        verdict = await self.inner.handle(message)
        await self._park_if(message)
        return verdict

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        verdicts = await self.inner.handle_batch(messages)
        for message in messages:
            await self._park_if(message)
        return verdicts


def on_redis(config: dict[str, Any]) -> IdempotentConsumer:
    """The Redis store; the handler counts its runs per key in the hash ``config["hits"]``."""
    import redis

    counter = redis.Redis.from_url(config["redis_url"])
    hits, runs = config["hits"], config.get("runs")
    store = open_store(config["redis_url"], prefix=config["prefix"])

    def count(message: Message) -> None:
        key = message.headers[IDEMPOTENCY_KEY]
        note_run(runs, key)
        counter.hincrby(hits, key, 1)

    guard = Guard(store, lease=config["lease"])
    return IdempotentConsumer(guard, config["scope"], count, max_attempts=5, retry_delay=0.2)


def transactional(config: dict[str, Any]) -> Any:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import Connection

    from mideng.stores.sql import SQLStore

    engine = create_engine(config["db_url"], pool_size=4)
    store = SQLStore.from_url(config["db_url"], table=config["record_table"], create_schema=False)
    guard = Guard(store, lease=config["lease"])
    effects, runs = config["effects_table"], config.get("runs")
    crash = config.get("crash") or {}
    jitter = config.get("jitter", 0.0)

    def deduct(message: Message, conn: Connection) -> None:
        key = message.headers[IDEMPOTENCY_KEY]
        note_run(runs, key)
        conn.execute(
            text(f"INSERT INTO {effects} (order_key, pid) VALUES (:key, :pid)"),
            {"key": key, "pid": os.getpid()},
        )
        if jitter:
            time.sleep(random.uniform(0, jitter))
        if crash.get("at") == "before_commit" and key == crash["key"]:
            mark(Path(crash["marker"]))
            time.sleep(PARKED)
            raise SystemExit("never killed before the commit")

    consumer = IdempotentConsumer(
        guard, config["scope"], deduct, engine=engine, max_attempts=5, retry_delay=0.2
    )
    if crash.get("at") == "after_commit":
        return StopsAfterCommit(consumer, crash["key"], Path(crash["marker"]))
    return consumer


def operation(config: dict[str, Any]) -> OperationConsumer:
    """An operation per message: ``reserve`` a local step on the operation's own transaction,
    then ``sms`` and ``coupon``, two remote effects each committed on its own (as a provider
    would), every effect one row ``<key>/<step>`` of the effects table. With ``crash`` at
    ``between_steps`` the body parks on its key after ``sms``, before ``coupon``."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import Connection

    from mideng.stores.sql import SQLStore

    engine = create_engine(config["db_url"], pool_size=4)
    store = SQLStore.from_url(config["db_url"], table=config["record_table"], create_schema=False)
    guard = Guard(store, lease=config["lease"])
    guard.configure_scope(config["scope"], on_error="retry", max_attempts=5)
    effects, runs = config["effects_table"], config.get("runs")
    crash = config.get("crash") or {}

    def effect(conn: Connection, what: str) -> None:
        conn.execute(
            text(f"INSERT INTO {effects} (order_key, pid) VALUES (:key, :pid)"),
            {"key": what, "pid": os.getpid()},
        )

    @guard.step("reserve", conn="conn")
    def reserve(conn: Connection, order: str) -> None:
        effect(conn, f"{order}/reserve")

    @guard.step("sms")
    def sms(order: str) -> None:
        with engine.begin() as conn:
            effect(conn, f"{order}/sms")

    @guard.step("coupon")
    def coupon(order: str) -> None:
        with engine.begin() as conn:
            effect(conn, f"{order}/coupon")

    @guard.operation(config["scope"], key="{order}", steps=("reserve", "sms", "coupon"))
    def notify(order: str) -> str:
        note_run(runs, order)
        with engine.begin() as conn:
            reserve(conn, order)
        sms(order)
        if crash.get("at") == "between_steps" and order == crash["key"]:
            mark(Path(crash["marker"]))
            time.sleep(PARKED)
            raise SystemExit("never killed between the steps")
        coupon(order)
        return "sent"

    return OperationConsumer(guard, notify, retry_delay=0.2, in_flight_delay=0.5)


def awaiting(task: asyncio.Task[Any]) -> list[str]:
    """Where ``task`` waits, outermost first: the chain of coroutines each awaits (a task's own
    stack shows only its outermost frame)."""
    places: list[str] = []
    step: Any = task.get_coro()
    while step is not None:
        frame = getattr(step, "cr_frame", None) or getattr(step, "gi_frame", None)
        if frame is None:
            places.append(f"  awaiting {step!r}"[:300])
            break
        places.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        step = getattr(step, "cr_await", None) or getattr(step, "gi_yieldfrom", None)
    return places


def dump_tasks(after: float) -> None:
    """Every pending asyncio task's await chain, to stderr (the worker's log)."""
    tasks = asyncio.all_tasks()
    print(f"--- still running {after}s after SIGTERM: {len(tasks)} task(s)", file=sys.stderr)
    for task in tasks:
        print(f"task {task.get_name()}:", *awaiting(task), sep="\n", file=sys.stderr)
    sys.stderr.flush()


#: When SIGTERM came (time.monotonic()), for the log's last line.
TERMINATED: list[float] = []


def stopping(stop: asyncio.Event, after: float) -> None:
    """SIGTERM: set the adapter's stop event and arm the hang dumps."""
    if stop.is_set():
        return
    stop.set()
    TERMINATED.append(time.monotonic())
    # The thread dump fires even if the loop is blocked or the process hangs past asyncio.run
    # (a thread that never finishes); the task dump shows where each coroutine is awaiting.
    faulthandler.dump_traceback_later(after, exit=False)
    asyncio.get_running_loop().call_later(after, dump_tasks, after)


async def run(config: dict[str, Any]) -> None:
    stop = asyncio.Event()
    after = float(config.get("hang_dump", HANG_DUMP))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping, stop, after)
    config = {"scope": "stock", "lease": 10.0, **config}
    mode = config.get("mode")
    consumer: Any
    if mode == "store":
        consumer = on_redis(config)
    elif mode == "operation":
        consumer = operation(config)
    else:
        consumer = transactional(config)
    if config.get("ready"):
        mark(Path(config["ready"]))
    consume = adapter(config["broker"])
    await consume(consumer, config["url"], stop=stop, **config["adapter"])


def main() -> int:
    config = json.loads(Path(sys.argv[1]).read_text())
    print(f"--- pid {os.getpid()} started", file=sys.stderr, flush=True)
    asyncio.run(run(config))
    if TERMINATED:
        print(f"--- stopped {time.monotonic() - TERMINATED[0]:.1f}s after SIGTERM", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
