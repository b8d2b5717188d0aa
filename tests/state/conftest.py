"""Fixtures for the business-table primitives: a database per module (SQLite, PostgreSQL,
MariaDB), its tables under unique names, and a side (sync or async) per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import MetaData, create_engine, text

from bench.business import business_tables
from tests.services import MYSQL_URL, POSTGRES_URL, need
from tests.state.sides import AsyncSide, Db, Side

DATABASES = ["sqlite", "postgresql", "mysql"]


def urls(name: str, tmp: Path) -> tuple[str, str]:
    """(sync URL, async URL) of one database."""
    if name == "postgresql":
        return POSTGRES_URL, POSTGRES_URL
    if name == "mysql":
        return MYSQL_URL, MYSQL_URL.replace("+pymysql", "+asyncmy")
    path = tmp / "state.db"
    return f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}"


@pytest.fixture(scope="module", params=DATABASES)
def db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Db]:
    name = str(request.param)
    if name != "sqlite":
        need(name)
    url, aurl = urls(name, tmp_path_factory.mktemp(name))
    engine = create_engine(url)
    metadata = MetaData()
    found = Db(name, url, aurl, engine, metadata, business_tables(metadata, uuid.uuid4().hex[:10]))
    metadata.create_all(engine)
    yield found
    metadata.drop_all(engine)
    engine.dispose()


@pytest.fixture(params=["sync", "async"])
def side(request: pytest.FixtureRequest, db: Db) -> Iterator[Side]:
    made = Side(db) if request.param == "sync" else AsyncSide(db)
    yield made
    made.close()


@pytest.fixture(params=["caller", "autocommit"])
def mode(request: pytest.FixtureRequest) -> str:
    """``caller``: inside the caller's open transaction; ``autocommit``: none open."""
    return str(request.param)


def new_key() -> str:
    return f"o-{uuid.uuid4().hex[:16]}"


def seed_order(db: Db, order_no: str, status: str = "NEW", amount: int = 10) -> int:
    orders = db.tables["orders"]
    with db.engine.begin() as conn:
        conn.execute(orders.insert().values(order_no=order_no, status=status, amount=amount))
        found = conn.execute(
            text(f"SELECT id FROM {orders.name} WHERE order_no = :o"), {"o": order_no}
        ).scalar_one()
    return int(found)


def seed_stock(db: Db, sku: str, qty: int) -> None:
    with db.engine.begin() as conn:
        conn.execute(db.tables["stock"].insert().values(sku=sku, qty=qty))
