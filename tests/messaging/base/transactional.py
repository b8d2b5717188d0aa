"""The transactional variant through the adapter: the handler's writes and the dedup record
commit in one transaction before the message is settled; a copy is settled without running;
a handler error rolls its writes back with the record, and the retry runs it again.

The consumer-level cases (every database, an AsyncEngine, a copy waiting on the open
transaction, a failed commit) are tests/messaging/test_transactional.py's; the crash points
and the outage's cut commits, tests/messaging/base/storm.py's and outage.py's."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from mideng import Guard, open_store
from mideng.core.record import Status
from mideng.messaging import IdempotentConsumer, Message
from tests.messaging.base.broker import Broker, key, keyed
from tests.messaging.running import consume_until


class TransactionalCases:
    def test_the_writes_and_the_record_commit_together_before_the_ack(
        self, broker: Broker, tmp_path: Path
    ) -> None:
        url = f"sqlite:///{tmp_path / 'shop.db'}"
        store, engine = open_store(url), create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE moves (order_key VARCHAR(64) NOT NULL)"))
        runs: Counter[str] = Counter()

        def deduct(message: Message, conn: Any) -> None:
            runs.update([key(message)])
            conn.execute(text("INSERT INTO moves VALUES (:k)"), {"k": key(message)})
            if key(message) == "order:bad" and runs["order:bad"] == 1:
                raise LookupError("no such product yet")  # its insert rolls back with it

        def moved() -> list[str]:
            with engine.connect() as conn:
                return sorted(r[0] for r in conn.execute(text("SELECT order_key FROM moves")))

        guard = Guard(store)
        consumer = IdempotentConsumer(guard, "stock", deduct, engine=engine, retry_delay=0.2)
        broker.publish(keyed("order:1", "order:2", "order:1", "order:bad", "order:2"))

        async def done() -> bool:
            return len(moved()) == 3 and await broker.asettled()

        try:
            asyncio.run(consume_until(lambda stop: broker.consume(consumer, stop), done))
            assert broker.unsettled() == 0
            assert moved() == ["order:1", "order:2", "order:bad"]
            assert runs == Counter({"order:1": 1, "order:2": 1, "order:bad": 2})
            for done_key in runs:
                record = guard.get("stock", done_key)
                assert record is not None
                assert record.status is Status.SUCCEEDED
        finally:
            store.close()
            engine.dispose()
