"""The SQL store's async side maps its own driver's failures as the sync side does.

The async engines run on other drivers than the sync ones (asyncmy for MySQL and MariaDB,
psycopg's async connection for PostgreSQL). A lock wait that times out, a connection the
server killed, a deadlock: each must reach the caller as StoreUnavailableError (and a
deadlock be retried), never as the driver's own exception.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from mideng.core.record import ClaimRequest
from mideng.errors import StoreUnavailableError
from mideng.stores.sql import SQLStore
from tests.backends_sql import drop_table, hold_row
from tests.services import MYSQL_URL, POSTGRES_URL, need

SERVERS = {"postgresql": POSTGRES_URL, "mysql": MYSQL_URL}


@pytest.fixture(params=list(SERVERS))
def family(request: pytest.FixtureRequest) -> str:
    need(request.param)
    return str(request.param)


@pytest.fixture
def table(family: str) -> Iterator[str]:
    name = f"mideng_ade_{uuid.uuid4().hex[:10]}"
    yield name
    drop_table(SERVERS[family], name)


def req(key: str) -> ClaimRequest:
    return ClaimRequest("pay", key, uuid.uuid4().hex, 30.0, 3600.0)


def test_async_lock_wait_timeout_is_store_unavailable(family: str, table: str) -> None:
    store = SQLStore.from_url(SERVERS[family], table=table, statement_timeout=1.0)
    holder, conn, trans = hold_row(SERVERS[family], table, "locked")

    async def main() -> None:
        try:
            with pytest.raises(StoreUnavailableError) as caught:
                await store.aclaim(req("locked"))
            assert caught.value.__cause__ is not None  # the driver's error, chained
            assert (await store.aclaim(req("free"))).acquired  # the store is fine afterwards
        finally:
            await store.aclose()

    try:
        asyncio.run(main())
    finally:
        trans.rollback()
        conn.close()
        holder.dispose()
        store.close()


def _kill_others(family: str, table: str, store: SQLStore) -> None:
    """The server ends every session of the store's own (the admin's connection survives)."""
    from sqlalchemy import create_engine

    engine = create_engine(store.config.sqlalchemy_url())
    try:
        with engine.connect() as admin:
            if family == "postgresql":
                admin.exec_driver_sql(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE pid <> pg_backend_pid() AND application_name = %(app)s",
                    {"app": table},
                )
            else:
                mine = admin.exec_driver_sql("SELECT CONNECTION_ID()").scalar()
                rows = admin.exec_driver_sql(
                    "SELECT id FROM information_schema.processlist WHERE db = 'test' "
                    "AND info IS NULL AND user = 'root'"
                ).all()
                for (pid,) in rows:
                    if pid != mine:
                        admin.exec_driver_sql(f"KILL CONNECTION {int(pid)}")
    finally:
        engine.dispose()


def test_async_killed_connection_is_store_unavailable_once(family: str, table: str) -> None:
    # Each pooled connection the server killed fails one call, as StoreUnavailableError, and
    # is replaced.
    options: dict[str, Any] = {"table": table}
    if family == "postgresql":
        options["connect_args"] = {"application_name": table}
    store = SQLStore.from_url(SERVERS[family], **options)

    async def main() -> None:
        try:
            assert (await store.aclaim(req("before"))).acquired
            await asyncio.to_thread(_kill_others, family, table, store)
            with pytest.raises(StoreUnavailableError) as caught:
                await store.aget("pay", "before")
            assert caught.value.__cause__ is not None
            assert await store.aget("pay", "before") is not None
        finally:
            await store.aclose()

    try:
        asyncio.run(main())
    finally:
        store.close()


def test_async_mysql_deadlock_is_retried() -> None:
    # A deadlock changed nothing: the operation runs again, as on the sync side.
    need("mysql")
    import asyncmy.errors

    name = f"mideng_ade_{uuid.uuid4().hex[:10]}"
    store = SQLStore.from_url(MYSQL_URL, table=name)
    calls: list[int] = []

    async def flaky(stmts: Any, cur: Any) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise asyncmy.errors.OperationalError(1213, "Deadlock found when trying to get lock")
        return "done"

    async def main() -> None:
        try:
            assert await store.aexecutor.run(flaky) == "done"
        finally:
            await store.aclose()

    try:
        asyncio.run(main())
        assert len(calls) == 2
    finally:
        store.close()
        drop_table(MYSQL_URL, name)
