"""PostgreSQL and MariaDB/MySQL in the store matrix: a fresh table per test, dropped after."""

from __future__ import annotations

from typing import Any

from mideng.stores.sql import SQLStore
from tests.backends import Backend, Ctx, Opened
from tests.services import MYSQL_URL, POSTGRES_URL


def drop_table(url: str, table: str) -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    engine = create_engine(
        SQLStore.from_url(url, create_schema=False).config.sqlalchemy_url(), poolclass=NullPool
    )
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
    finally:
        engine.dispose()


def hold_row(url: str, table: str, key: str) -> tuple[Any, Any, Any]:
    """Another session inserts ``key`` into the store's ``table`` and keeps its transaction
    open (it holds the row lock); its engine, connection and transaction, to roll back."""
    from sqlalchemy import create_engine

    engine = create_engine(
        SQLStore.from_url(url, table=table, create_schema=False).config.sqlalchemy_url()
    )
    conn = engine.connect()
    trans = conn.begin()
    k = "`key`" if engine.dialect.name in ("mysql", "mariadb") else "key"
    conn.exec_driver_sql(
        f"INSERT INTO {table} (scope, {k}, status, fence, owner, created_at, updated_at) "
        f"VALUES ('pay', '{key}', 'processing', 1, 'other', 0, 0)"
    )
    return engine, conn, trans


def open_sql(url: str, ctx: Ctx, **options: Any) -> Opened:
    table = f"mideng_t_{ctx.suffix}"
    ctx.cleanups.append(lambda: drop_table(url, table))
    ctx.cleanups.append(lambda: drop_table(url, f"{table}_steps"))  # multi-step operations
    ctx.cleanups.append(lambda: drop_table(url, f"{table}_audit"))  # operators' actions
    store = SQLStore.from_url(url, table=table, **options)
    return Opened(store, url, {"table": table, **options})


# The stores learn their claim order per scope (stores.record_table.claims.ClaimOrder); each
# database also runs pinned to the order its learned runs see less of here (tests make few
# duplicates per scope, races many), so both orders face every contract, race and crash on both
# databases.
BACKENDS: list[Backend] = [
    Backend("postgresql", lambda ctx: open_sql(POSTGRES_URL, ctx), service="postgresql"),
    Backend(
        "postgresql-insert-first",
        lambda ctx: open_sql(POSTGRES_URL, ctx, read_first=False),
        service="postgresql",
    ),
    Backend("mysql", lambda ctx: open_sql(MYSQL_URL, ctx), service="mysql"),
    Backend(
        "mysql-read-first",
        lambda ctx: open_sql(MYSQL_URL, ctx, read_first=True),
        service="mysql",
    ),
]
