"""Outbox fixtures: a fresh outbox table per test on SQLite, PostgreSQL or MariaDB."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from mideng.outbox import Outbox
from tests.brokers import AMQP_URL, broker_names, kafka_broker  # noqa: F401  (fixtures)
from tests.services import MYSQL_URL, POSTGRES_URL, need

DATABASES = ("sqlite", "postgresql", "mysql")


@dataclass
class Db:
    name: str
    url: str
    engine: Engine
    outbox: Outbox

    @property
    def table(self) -> str:
        return self.outbox.table

    def rows(self, where: str = "1=1") -> list[Any]:
        with self.engine.connect() as connection:
            return list(
                connection.execute(
                    text(f"SELECT * FROM {self.table} WHERE {where} ORDER BY created_at")
                ).mappings()
            )

    def key_rows(self) -> list[Any]:
        with self.engine.connect() as connection:
            return list(connection.execute(text(f"SELECT * FROM {self.table}_keys")).mappings())


def open_db(name: str, tmp_path: Path, **engine_options: Any) -> Db:
    if name == "sqlite":
        url = f"sqlite:///{tmp_path / 'outbox.db'}"
    elif name == "postgresql":
        need("postgresql")
        url = POSTGRES_URL
    else:
        need("mysql")
        url = MYSQL_URL
    engine = create_engine(url, **engine_options)
    outbox = Outbox(engine, table=f"obx_{uuid.uuid4().hex[:10]}")
    outbox.create_schema()
    return Db(name, url, engine, outbox)


def drop(db: Db) -> None:
    with contextlib.suppress(Exception), db.engine.begin() as connection:
        connection.execute(text(f"DROP TABLE IF EXISTS {db.table}"))
        connection.execute(text(f"DROP TABLE IF EXISTS {db.table}_keys"))
        if db.name == "postgresql":
            connection.execute(text(f"DROP FUNCTION IF EXISTS {db.table}_notify()"))
    db.engine.dispose()


@pytest.fixture(params=DATABASES)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    handle = open_db(request.param, tmp_path)
    yield handle
    drop(handle)


@pytest.fixture(params=("postgresql", "mysql"))
def server_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    handle = open_db(request.param, tmp_path, pool_size=12)
    yield handle
    drop(handle)


def fill(db: Db, keys: int, per_key: int, unkeyed: int = 0) -> list[str]:
    """Rows committed in one transaction: ``per_key`` events for each of ``keys`` keys, round
    by round, then ``unkeyed`` rows without a key; their message ids in that order."""
    ids = []
    with db.engine.begin() as connection:
        for n in range(per_key):
            for k in range(keys):
                ids.append(db.outbox.add(connection, "orders", {"k": k, "n": n}, key=f"order:{k}"))
        for n in range(unkeyed):
            ids.append(db.outbox.add(connection, "orders", {"n": n}))
    return ids


def declare_queue(name: str) -> None:
    """A durable RabbitMQ queue named ``name`` (the default exchange routes to it by name)."""

    async def declare() -> None:
        import aio_pika

        async with await aio_pika.connect(AMQP_URL) as connection:
            channel = await connection.channel()
            await channel.declare_queue(name, durable=True)

    asyncio.run(declare())
