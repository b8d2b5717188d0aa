"""Business transactions from many threads, half rolled back, while relays publish.

Each transaction bumps its key's counter in a business table, then adds a message carrying
the new count. A rolled-back transaction takes its bump back, so a key's committed messages
carry 1, 2, … m in the order they committed: the first arrivals of a key must read exactly
that. Which transactions committed is recorded by the thread that committed them.

On MariaDB a business transaction can be chosen as an InnoDB deadlock victim, with the relays'
lock waits in the cycle; InnoDB then rolls all of it back, outbox row included. A worker does
what any InnoDB application must: it records the attempt as rolled back and runs the
transaction again, so a victim is one more rolled-back transaction whose message must not
arrive.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from mideng.db.dialect import retryable
from mideng.messaging.publish import Publisher
from mideng.outbox import Relay
from tests.outbox.conftest import Db


@dataclass
class Arrival:
    message_id: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class Storm:
    db: Db
    destination: str
    transactions: int = 1000
    threads: int = 8
    keys: int = 25
    committed: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.business = f"{self.db.table}_stock"
        with self.db.engine.begin() as connection:
            connection.execute(
                text(f"CREATE TABLE {self.business} (k VARCHAR(64) PRIMARY KEY, n INTEGER)")
            )
            for k in range(self.keys):
                connection.execute(
                    text(f"INSERT INTO {self.business} (k, n) VALUES (:k, 0)"),
                    {"k": f"order:{k}"},
                )

    def drop(self) -> None:
        with self.db.engine.begin() as connection:
            connection.execute(text(f"DROP TABLE IF EXISTS {self.business}"))

    def _worker(self, worker: int, count: int) -> None:
        rng = random.Random(worker)
        for i in range(count):
            key = f"order:{rng.randrange(self.keys)}"
            commit = (worker * count + i) % 2 == 0  # exactly half over all threads
            while True:
                tx = f"{worker}-{i}-{uuid.uuid4().hex[:6]}"
                try:
                    self._transaction(key, tx, commit)
                except DBAPIError as exc:
                    if exc.orig is None or not retryable(exc.orig):
                        raise
                    self.rolled_back.append(tx)
                    continue
                break

    def _transaction(self, key: str, tx: str, commit: bool) -> None:
        with self.db.engine.connect() as connection:
            connection.execute(
                text(f"UPDATE {self.business} SET n = n + 1 WHERE k = :k"), {"k": key}
            )
            n = connection.execute(
                text(f"SELECT n FROM {self.business} WHERE k = :k"), {"k": key}
            ).scalar_one()
            self.db.outbox.add(
                connection, self.destination, {"key": key, "n": n, "tx": tx}, key=key
            )
            if commit:
                connection.commit()
                self.committed.append(tx)
            else:
                connection.rollback()
                self.rolled_back.append(tx)

    async def run(self, broker: str | Publisher, relays: int = 2, **relay_options: Any) -> None:
        """The storm with ``relays`` relays publishing while it runs, then drained."""
        stop = asyncio.Event()
        relay_options.setdefault("poll", 0.05)
        workers = [
            Relay(self.db.engine, broker, table=self.db.table, **relay_options)
            for _ in range(relays)
        ]
        for relay in workers:
            await relay.start()
        running = [asyncio.create_task(relay.run(stop)) for relay in workers]
        loop = asyncio.get_running_loop()
        per_thread = self.transactions // self.threads
        try:
            try:
                with ThreadPoolExecutor(self.threads) as pool:
                    await asyncio.gather(
                        *(
                            loop.run_in_executor(pool, self._worker, worker, per_thread)
                            for worker in range(self.threads)
                        )
                    )
            finally:
                stop.set()
                await asyncio.gather(*running)
            await workers[0].run_once()
        finally:
            # Closed on a failure too: a relay left open is collected later, in another
            # test, where its connections complain that their event loop is gone.
            for relay in workers:
                await relay.close()

    def check(self, arrivals: Sequence[Arrival]) -> None:
        """Exactly the committed messages, with their row ids, first arrivals in key order."""
        assert len(self.committed) == self.transactions // 2
        firsts: dict[str, Arrival] = {}
        for arrival in arrivals:
            assert arrival.headers["message-id"] == arrival.message_id
            earlier = firsts.setdefault(arrival.message_id, arrival)
            assert earlier.body == arrival.body  # a re-publish is the same message
        received = {arrival.body["tx"] for arrival in firsts.values()}
        assert received == set(self.committed)
        assert not received & set(self.rolled_back)
        per_key: dict[str, list[int]] = {}
        for arrival in firsts.values():  # dicts keep insertion order: first-arrival order
            assert arrival.headers["idempotency-key"] == arrival.body["key"]
            per_key.setdefault(arrival.body["key"], []).append(arrival.body["n"])
        for key, counts in per_key.items():
            assert counts == list(range(1, len(counts) + 1)), key
        rows = self.db.rows()
        assert len(rows) == len(self.committed)
        assert all(row["state"] == 1 for row in rows)
        assert {row["id"] for row in rows} == set(firsts)


def arrival(message_id: str, body: bytes, headers: dict[str, Any]) -> Arrival:
    decoded = {
        str(name): value.decode() if isinstance(value, bytes) else str(value)
        for name, value in headers.items()
    }
    return Arrival(message_id, json.loads(body), decoded)
