"""A COMMIT that fails: the site that began the transaction rolls the connection back, so its
next statement runs (instead of SQLAlchemy's PendingRollbackError) and no pool can hand the
dead transaction to its next user; the record and the business writes are both gone."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from mideng import Guard, open_store
from tests.services import POSTGRES_URL, need


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def deferred() -> Iterator[tuple[Guard, Engine, str, str]]:
    """A guard over PostgreSQL and a table whose UNIQUE check waits for the COMMIT."""
    need("postgresql")
    suffix = uuid.uuid4().hex[:10]
    records, table = f"mideng_cf_{suffix}", f"deferred_{suffix}"
    store = open_store(POSTGRES_URL, table=records)
    engine = create_engine(POSTGRES_URL)
    with engine.begin() as conn:
        conn.execute(text(f"CREATE TABLE {table} (x int UNIQUE DEFERRABLE INITIALLY DEFERRED)"))
    yield Guard(store), engine, records, table
    store.close()
    with engine.begin() as conn:
        conn.execute(text(f"DROP TABLE {table}"))
        conn.execute(text(f"DROP TABLE IF EXISTS {records}"))
    engine.dispose()


def test_a_failed_commit_leaves_the_connection_usable(
    deferred: tuple[Guard, Engine, str, str],
) -> None:
    guard, engine, _, table = deferred

    def block(conn: Connection) -> None:
        with guard.transaction(conn, "pay", "o-1") as tx:
            conn.execute(text(f"INSERT INTO {table} VALUES (1), (1)"))
            tx.set_result(1)

    with engine.connect() as conn:
        with pytest.raises(IntegrityError):
            block(conn)
        assert not conn.in_transaction()
        assert conn.execute(text(f"SELECT count(*) FROM {table}")).scalar() == 0
    assert guard.get("pay", "o-1") is None  # the record went with the writes: a retry runs


@pytest.mark.anyio
async def test_async_a_failed_commit_leaves_the_connection_usable(
    deferred: tuple[Guard, Engine, str, str],
) -> None:
    guard, _, _, table = deferred

    async def block(conn: AsyncConnection) -> None:
        async with guard.atransaction(conn, "pay", "o-2") as tx:
            await conn.execute(text(f"INSERT INTO {table} VALUES (2), (2)"))
            tx.set_result(2)

    engine = create_async_engine(POSTGRES_URL)
    try:
        async with engine.connect() as conn:
            with pytest.raises(IntegrityError):
                await block(conn)
            assert not conn.in_transaction()
            assert (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar() == 0
    finally:
        await engine.dispose()
    assert guard.get("pay", "o-2") is None
