"""The parent side of the RabbitMQ and Redis Streams storms and crash tests: the brokers'
publish and "settled" checks, the effect and record tables, the worker processes and kills.
tests/messaging/consumer_worker.py is the child."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mideng.messaging.headers import IDEMPOTENCY_KEY
from tests.brokers import AMQP_URL, BrokerNames, token
from tests.services import MYSQL_URL, POSTGRES_URL, REDIS_URL

ROOT = Path(__file__).resolve().parent.parent.parent


def storm_messages(count: int, keys: int, seed: int) -> list[tuple[str, bytes]]:
    """``keys`` distinct business keys, the rest of ``count`` copies of random ones, shuffled:
    a producer's re-publishes, each a new broker message."""
    rng = random.Random(seed)
    chosen = [f"order:{n}" for n in range(keys)]
    chosen += [rng.choice(chosen) for _ in range(count - keys)]
    rng.shuffle(chosen)
    return [(key, json.dumps({"order": key, "n": i}).encode()) for i, key in enumerate(chosen)]


class RabbitSide:
    broker = "rabbitmq"
    url = AMQP_URL

    def __init__(self, names: BrokerNames, prefetch: int = 20) -> None:
        self.queue = names.rabbitmq_queue()
        self.prefetch = prefetch

    def adapter(self) -> dict[str, Any]:
        return {"queue": self.queue, "prefetch": self.prefetch}

    def publish(self, messages: list[tuple[str, bytes]]) -> None:
        asyncio.run(self._publish(messages))

    async def _publish(self, messages: list[tuple[str, bytes]]) -> None:
        import aio_pika

        connection = await aio_pika.connect(self.url)
        async with connection:
            channel = await connection.channel()
            await channel.declare_queue(self.queue, durable=True)
            for n, (key, body) in enumerate(messages):
                await channel.default_exchange.publish(
                    aio_pika.Message(body, headers={IDEMPOTENCY_KEY: key}, message_id=f"m{n}"),
                    routing_key=self.queue,
                )

    def counts(self) -> tuple[int, int]:
        """(ready, consumers) as the broker reports them."""
        return asyncio.run(self._counts())

    async def _counts(self) -> tuple[int, int]:
        import aio_pika

        connection = await aio_pika.connect(self.url)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(self.queue, passive=True)
            result = queue.declaration_result
            return result.message_count or 0, result.consumer_count or 0

    def settled(self) -> bool:
        return self.counts()[0] == 0


class StreamSide:
    broker = "redis_streams"
    url = REDIS_URL

    def __init__(self, names: BrokerNames, batch: int = 20) -> None:
        found = names.redis_stream()
        self.stream, self.group, self.dead = found.stream, found.group, found.dead
        self.batch = batch

    def adapter(self) -> dict[str, Any]:
        return {"stream": self.stream, "group": self.group, "batch": self.batch, "block": 0.2}

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url)

    def publish(self, messages: list[tuple[str, bytes]]) -> None:
        client = self.client()
        try:
            pipe = client.pipeline(transaction=False)
            for key, body in messages:
                pipe.xadd(self.stream, {"body": body, IDEMPOTENCY_KEY: key})
            pipe.execute()
        finally:
            client.close()

    def settled(self) -> bool:
        client = self.client()
        try:
            groups = client.xinfo_groups(self.stream)
        finally:
            client.close()
        mine = [g for g in groups if g["name"].decode() == self.group]
        return bool(mine) and mine[0]["pending"] == 0 and mine[0]["lag"] == 0


@dataclass
class Tables:
    """An effects table (a row per handler run that committed) and a record table."""

    db_url: str
    effects: str = field(default_factory=lambda: f"mideng_effects_{token()}")
    records: str = field(default_factory=lambda: f"mideng_records_{token()}")

    def __post_init__(self) -> None:
        from sqlalchemy import create_engine
        from sqlalchemy.pool import NullPool

        self.engine = create_engine(self.db_url, poolclass=NullPool)
        serial = "SERIAL" if self.engine.dialect.name == "postgresql" else "INT AUTO_INCREMENT"
        self._ddl = (
            f"CREATE TABLE {self.effects} (id {serial} PRIMARY KEY, order_key VARCHAR(200), "
            "pid INT)"
        )

    def create(self) -> None:
        from sqlalchemy import text

        from mideng import open_store

        with self.engine.begin() as conn:
            conn.execute(text(self._ddl))
        open_store(self.db_url, table=self.records).close()

    def drop(self) -> None:
        from sqlalchemy import text

        with self.engine.begin() as conn:
            conn.execute(text(f"DROP TABLE IF EXISTS {self.effects}"))
            conn.execute(text(f"DROP TABLE IF EXISTS {self.records}"))
        self.engine.dispose()

    def effects_by_key(self) -> dict[str, int]:
        from sqlalchemy import text

        with self.engine.connect() as conn:
            sql = f"SELECT order_key, COUNT(*) FROM {self.effects} GROUP BY order_key"
            return {str(key): int(count) for key, count in conn.execute(text(sql)).all()}

    def config(self) -> dict[str, Any]:
        return {
            "mode": "transactional",
            "db_url": self.db_url,
            "store_url": self.db_url,
            "record_table": self.records,
            "effects_table": self.effects,
        }


DATABASES = {"postgresql": POSTGRES_URL, "mysql": MYSQL_URL}


class Workers:
    """Consumer processes by slot; a slot can be SIGKILLed and started again."""

    def __init__(self, workdir: Path, config: dict[str, Any]) -> None:
        self.workdir, self.config = workdir, config
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.ready: dict[int, Path] = {}

    def start(self, slot: int, **overrides: Any) -> None:
        config = {**self.config, **overrides}
        if config["broker"] == "redis_streams":
            config["adapter"] = {**config["adapter"], "name": f"member-{slot}"}
        path = self.workdir / f"worker-{slot}-{token()}.json"
        path.write_text(json.dumps(config))
        self.ready[slot] = path.with_suffix(".ready")
        with (self.workdir / f"worker-{slot}.log").open("ab") as log:
            self.processes[slot] = subprocess.Popen(
                [sys.executable, "-m", "tests.messaging.consumer_worker", str(path)],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill(self, slot: int) -> None:
        process = self.processes[slot]
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    def stop_all(self, timeout: float = 60.0) -> list[int | None]:
        # A process just started may not have its SIGTERM handler yet: wait until it says so.
        for slot, process in self.processes.items():
            deadline = time.monotonic() + timeout
            while process.poll() is None and not self.ready[slot].exists():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for process in self.processes.values():
            try:
                codes.append(process.wait(timeout=timeout))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                codes.append(None)
        return codes

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.workdir.glob("worker-*.log"))
        )


def wait_for(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll)


def runs_by_key(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().split():
            counts[line] = counts.get(line, 0) + 1
    return counts
