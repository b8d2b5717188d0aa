"""A consumer process for the RabbitMQ and Redis Streams storms and crash tests.

``python -m tests.messaging.consumer_worker CONFIG.json``. ``mode`` is ``transactional`` (the
handler writes one effect row in the dedup record's transaction, on PostgreSQL or MariaDB) or
``store`` (a Redis store, the handler counts its runs in a Redis hash). SIGTERM sets the
adapter's stop event. ``crash`` parks the process on one key for the parent to SIGKILL:
``before_commit`` after the handler's insert, ``after_commit`` once the transaction committed
and before the adapter acks; it writes ``crash["marker"]`` when it is there. Every handler run
appends the key to ``runs`` (one line, O_APPEND) before it writes, so the parent counts runs
that did not commit as well.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mideng import Guard, open_store
from mideng.messaging import IdempotentConsumer, Message, Verdict
from mideng.messaging.headers import IDEMPOTENCY_KEY

PARKED = 120.0


def _note_run(path: str | None, key: str) -> None:
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{key}\n".encode())
        finally:
            os.close(fd)


class ParksAfterCommit:
    """The consumer, parked after the crash key's transaction committed, before the ack."""

    def __init__(self, inner: IdempotentConsumer, key: str, marker: Path) -> None:
        self.inner, self.key, self.marker = inner, key, marker
        self.policy = inner.policy

    async def _park_if(self, message: Message) -> None:
        if message.headers.get(IDEMPOTENCY_KEY) == self.key and not self.marker.exists():
            self.marker.write_text(str(os.getpid()))
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


def build(config: dict[str, Any]) -> Any:
    crash = config.get("crash") or {}
    runs = config.get("runs")
    lease = config.get("lease", 2.0)
    if config["mode"] == "store":
        import redis

        counter = redis.Redis.from_url(config["redis_url"])
        hits = config["hits"]
        store = open_store(config["redis_url"], prefix=config["prefix"])

        def count(message: Message) -> None:
            key = message.headers[IDEMPOTENCY_KEY]
            _note_run(runs, key)
            counter.hincrby(hits, key, 1)

        return IdempotentConsumer(Guard(store, lease=lease), "stock", count, retry_delay=0.2)

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import Connection

    engine = create_engine(config["db_url"], pool_size=4)
    store = open_store(config["store_url"], table=config["record_table"])
    effects = config["effects_table"]

    def deduct(message: Message, conn: Connection) -> None:
        key = message.headers[IDEMPOTENCY_KEY]
        _note_run(runs, key)
        conn.execute(
            text(f"INSERT INTO {effects} (order_key, pid) VALUES (:key, :pid)"),
            {"key": key, "pid": os.getpid()},
        )
        parks = crash.get("at") == "before_commit" and key == crash["key"]
        if parks and not Path(crash["marker"]).exists():
            Path(crash["marker"]).write_text(str(os.getpid()))
            time.sleep(PARKED)
            raise SystemExit("never killed before the commit")

    consumer = IdempotentConsumer(
        Guard(store, lease=lease), "stock", deduct, engine=engine, retry_delay=0.2
    )
    if crash.get("at") == "after_commit":
        return ParksAfterCommit(consumer, crash["key"], Path(crash["marker"]))
    return consumer


async def run(config: dict[str, Any], ready: Path) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await asyncio.to_thread(ready.write_text, str(os.getpid()))  # now SIGTERM stops gracefully
    consumer = build(config)
    if config["broker"] == "rabbitmq":
        from mideng.messaging import rabbitmq

        await rabbitmq.consume(consumer, config["url"], stop=stop, **config["adapter"])
    else:
        from mideng.messaging import redis_streams

        await redis_streams.consume(consumer, config["url"], stop=stop, **config["adapter"])


def main() -> int:
    path = Path(sys.argv[1])
    asyncio.run(run(json.loads(path.read_text()), path.with_suffix(".ready")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
