"""The async MySQL/MariaDB side sends what the sync side sends, and says nothing more.

A claim's ``INSERT IGNORE`` that finds its key taken answers with a warning: that is how it says
so. asyncmy's cursor, seeing a warning count, would send ``SHOW WARNINGS`` and log each at
WARNING; PyMySQL only counts it. The server's own count of statements on the store's
connection (``Questions``) shows what really went out.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from mideng.core.record import ClaimRequest, Outcome
from mideng.stores.record_table.statements import Statements
from mideng.stores.sql import SQLStore
from tests.backends_sql import drop_table
from tests.services import MYSQL_URL, need

QUESTIONS = "SHOW SESSION STATUS LIKE 'Questions'"


@pytest.fixture
def store() -> Iterator[SQLStore]:
    need("mysql")
    table = f"mideng_q_{uuid.uuid4().hex[:10]}"
    # Insert first: the order in which a duplicate meets the warning.
    opened = SQLStore.from_url(MYSQL_URL, table=table, read_first=False)
    yield opened
    opened.close()
    drop_table(MYSQL_URL, table)


def req(key: str) -> ClaimRequest:
    return ClaimRequest("pay", key, uuid.uuid4().hex, 30.0, 3600.0)


class Counter:
    """Statements the server counted on the store's connection, minus the counting itself."""

    def __init__(self) -> None:
        self.cursors: set[int] = set()
        self.last = 0

    def seen(self, cur: Any, value: int) -> int:
        self.cursors.add(id(cur))  # one kept cursor: one connection throughout
        # Questions counts the SHOW that reads it, too.
        delta, self.last = value - self.last - 1, value
        return delta

    def sync(self, store: SQLStore) -> int:
        def read(stmts: Statements, cur: Any) -> int:
            cur.execute(QUESTIONS)
            return self.seen(cur, int(cur.fetchone()[1]))

        return store.executor.run(read)

    async def aio(self, store: SQLStore) -> int:
        async def read(stmts: Statements, cur: Any) -> int:
            await cur.execute(QUESTIONS)
            return self.seen(cur, int((await cur.fetchone())[1]))

        return await store.aexecutor.run(read)


def test_a_duplicate_claim_is_one_round_trip_per_statement_and_quiet(
    store: SQLStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sync = Counter()
    assert store.claim(req("sync")).outcome is Outcome.ACQUIRED
    sync.sync(store)
    assert store.claim(req("sync")).outcome is Outcome.IN_PROGRESS
    sync_sent = sync.sync(store)

    async def duplicate() -> int:
        counter = Counter()
        try:
            assert (await store.aclaim(req("async"))).outcome is Outcome.ACQUIRED
            await counter.aio(store)
            assert (await store.aclaim(req("async"))).outcome is Outcome.IN_PROGRESS
            sent = await counter.aio(store)
        finally:
            await store.aclose()
        assert len(counter.cursors) == 1
        return sent

    async_sent = asyncio.run(duplicate())
    # The insert that finds the key taken, then the read of the row it found: nothing else.
    assert sync_sent == async_sent == 2
    assert len(sync.cursors) == 1
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [], [r.getMessage() for r in loud]
