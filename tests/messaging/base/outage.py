"""A store outage never ends consume, batched.

The Redis store runs on a redis-server of the test's own (no persistence), SIGKILLed inside
the first handler run (after that batch's claims, before its completions) and started again
empty once the consumer has sent messages back while it was down. In the transactional mode
the database stays up but the test's own PostgreSQL connections (found by application_name,
no other client touched) are terminated in the first handler runs, so their COMMITs fail.
Either way consume keeps running, every key's effect happens exactly once (copies published
after the store is back are acked without running), the broker holds nothing pending or
unacked, and the messages sent back are counted as retries and logged.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import create_engine, text

from mideng import Guard, open_store
from mideng.messaging import IdempotentConsumer, Message
from mideng.stores.redis import RedisStore
from tests.brokers import token
from tests.messaging.base.broker import Broker, key, keyed, outcomes
from tests.redis_cluster import Server
from tests.services import POSTGRES_URL, need

KEYS = [f"order:{n:03d}" for n in range(40)]


def verdicts(registry: CollectorRegistry, verdict: str) -> float:
    value = registry.get_sample_value(
        "mideng_consumer_messages_total", {"scope": "stock", "verdict": verdict}
    )
    return value or 0.0


class Running:
    """consume in a task, and waits that fail at once if it returned."""

    def __init__(self, broker: Broker, consumer: IdempotentConsumer) -> None:
        self.broker, self.stop = broker, asyncio.Event()
        self.task = asyncio.ensure_future(broker.consume(consumer, self.stop))

    async def until(self, what: str, holds: Callable[[], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not holds():
            if self.task.done():
                await self.task
                raise AssertionError(f"consume returned while waiting until {what}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting until {what}")
            await asyncio.sleep(0.05)

    async def settled(self, what: str, holds: Callable[[], bool]) -> None:
        async def both() -> bool:
            return holds() and await self.broker.asettled()

        deadline = time.monotonic() + 60.0
        while not await both():
            if self.task.done():
                await self.task
                raise AssertionError(f"consume returned while waiting until {what}")
            if time.monotonic() > deadline:
                state = await asyncio.to_thread(self.broker.state)
                raise AssertionError(f"timed out until {what}: {state}")
            await asyncio.sleep(0.1)

    async def finish(self) -> None:
        assert not self.task.done(), "consume ended before stop was set"
        self.stop.set()
        await asyncio.wait_for(self.task, 15)


class StoreOutageCases:
    def test_a_redis_store_killed_mid_batch_and_back_empty_runs_every_key_once(
        self, broker: Broker, registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level("INFO", logger="mideng")
        server = Server().start()
        try:
            store = RedisStore.from_url(
                server.url,
                prefix=f"outage-{token()}",
                socket_timeout=0.5,
                socket_connect_timeout=0.5,
            )
            effects: list[str] = []

            async def deduct(message: Message) -> None:
                if not effects:
                    server.kill()  # the claims of this batch are taken, none of its completions
                effects.append(key(message))

            consumer = IdempotentConsumer(Guard(store, lease=30), "stock", deduct, retry_delay=0.2)
            broker.publish(keyed(*KEYS))

            async def scenario() -> None:
                run = Running(broker, consumer)
                # Down: what ran is kept, what was not claimed goes back; all of it more than
                # once.
                await run.until(
                    "the store is down", lambda: verdicts(registry, "retry") >= 2 * len(KEYS)
                )
                ran_while_down = list(effects)
                assert 0 < len(ran_while_down) < len(KEYS)
                await asyncio.to_thread(server.start)
                await run.settled("every key ran", lambda: set(effects) == set(KEYS))
                # Copies, as new broker messages.
                await asyncio.to_thread(broker.publish, keyed(*KEYS))
                # A kept completion written acks its message unrun too: those count as
                # duplicates.
                await run.settled(
                    "the copies are acked",
                    lambda: (
                        verdicts(registry, "duplicate")
                        >= len(KEYS) + outcomes(caplog, "completion_written")
                    ),
                )
                await run.finish()
                assert effects[: len(ran_while_down)] == ran_while_down
                await store.aclose()

            asyncio.run(scenario())
            assert Counter(effects) == Counter(KEYS)  # each key's effect exactly once
            assert broker.settled(), broker.state()
            assert outcomes(caplog, "uncompleted") >= 1
            assert outcomes(caplog, "completion_written") >= 1
            store.close()
        finally:
            server.cleanup()

    def test_transactional_commits_cut_by_terminated_connections_run_every_key_once(
        self, broker: Broker, registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
    ) -> None:
        need("postgresql")
        app = f"mideng-outage-{token()}"
        sep = "&" if "?" in POSTGRES_URL else "?"
        url = f"{POSTGRES_URL}{sep}application_name={app}"
        suffix = token()[:10]
        table, moves = f"mideng_out_{suffix}", f"stock_out_{suffix}"
        admin = create_engine(POSTGRES_URL)
        with admin.begin() as conn:
            conn.execute(text(f"CREATE TABLE {moves} (id SERIAL PRIMARY KEY, k TEXT NOT NULL)"))
        store = open_store(url, table=table)
        engine = create_engine(url)
        cuts = 0
        lock = threading.Lock()

        def cut() -> int:
            # Only this test's connections: other runs share the server.
            with admin.begin() as conn:
                found = conn.execute(
                    text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE application_name = :app AND pid <> pg_backend_pid()"
                    ),
                    {"app": app},
                )
                return int(found.scalar() or 0)

        def deduct(message: Message, conn: Any) -> None:
            nonlocal cuts
            conn.execute(text(f"INSERT INTO {moves} (k) VALUES (:k)"), {"k": key(message)})
            with lock:
                cutting = cuts < 8
                cuts += cutting
            if cutting:
                assert cut() >= 1  # this very connection among them: its COMMIT fails

        def effects() -> list[str]:
            with admin.connect() as conn:
                return [r[0] for r in conn.execute(text(f"SELECT k FROM {moves} ORDER BY id"))]

        try:
            consumer = IdempotentConsumer(
                Guard(store, lease=30), "stock", deduct, engine=engine, retry_delay=0.2
            )
            broker.publish(keyed(*KEYS))

            async def scenario() -> None:
                run = Running(broker, consumer)
                await run.settled("every key ran", lambda: set(effects()) == set(KEYS))
                await asyncio.to_thread(broker.publish, keyed(*KEYS))
                await run.settled(
                    "the copies are acked", lambda: verdicts(registry, "duplicate") >= len(KEYS)
                )
                await run.finish()

            asyncio.run(scenario())
            assert cuts == 8
            assert Counter(effects()) == Counter(KEYS)
            assert broker.settled(), broker.state()
            assert verdicts(registry, "retry") >= 8
            assert outcomes(caplog, "transaction_failed") >= 8
        finally:
            store.close()
            engine.dispose()
            with admin.begin() as conn:
                conn.execute(text(f"DROP TABLE IF EXISTS {moves}"))
                conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
            admin.dispose()
