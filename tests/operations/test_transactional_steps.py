"""A step on the caller's SQLAlchemy connection: its record commits with its own writes, or
rolls back with them (so the re-run runs it again), the guarantee guard.transaction gives."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from mideng import Guard
from mideng.errors import ConfigurationError
from mideng.stores.memory import MemoryStore
from tests.backends import Ctx, Opened
from tests.operations.processes import open_backend


@pytest.fixture(params=["postgresql", "mysql", "sqlite"])
def sql(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[tuple[Opened, Any, str]]:
    for opened in open_backend(request.param, ctx):
        store: Any = opened.store
        if request.param == "sqlite":
            engine = sa.create_engine(f"sqlite:///{store.path}", poolclass=NullPool)
        else:
            engine = sa.create_engine(store.config.sqlalchemy_url(), poolclass=NullPool)
        orders = f"orders_{ctx.suffix}"
        with engine.begin() as conn:
            conn.exec_driver_sql(
                f"CREATE TABLE {orders} (id VARCHAR(40) PRIMARY KEY, status VARCHAR(20))"
            )
        try:
            yield opened, engine, orders
        finally:
            with engine.begin() as conn:
                conn.exec_driver_sql(f"DROP TABLE {orders}")
            engine.dispose()


def test_a_transactional_step_commits_or_rolls_back_with_its_writes(
    sql: tuple[Opened, Any, str],
) -> None:
    opened, engine, orders = sql
    guard, scope = Guard(opened.store, lease=30), f"pay-{uuid.uuid4().hex[:6]}"
    runs: list[str] = []
    fail = {"after_paid": True, "sms": True}

    @guard.step("mark_paid", conn="conn")
    def mark_paid(conn: Any, order: str) -> str:
        runs.append("mark_paid")
        conn.execute(sa.text(f"INSERT INTO {orders} VALUES (:id, 'PAID')"), {"id": order})
        return "paid"

    @guard.step("send_sms")
    def send_sms(order: str) -> str:
        runs.append("send_sms")
        if fail["sms"]:
            raise RuntimeError("sms gateway down")
        return "sent"

    @guard.operation(scope, key="{order}")
    def pay(order: str) -> list[str]:
        with engine.begin() as conn:
            paid = mark_paid(conn, order)
            if fail["after_paid"]:
                raise RuntimeError("the caller's transaction fails after the step")
        return [paid, send_sms(order)]

    def paid_rows() -> int:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(f"SELECT count(*) FROM {orders}")).scalar_one())

    with pytest.raises(RuntimeError, match="caller's transaction"):
        pay("o1")
    assert paid_rows() == 0  # the write rolled back, and the step's record with it
    fail["after_paid"] = False
    with pytest.raises(RuntimeError, match="sms"):
        pay("o1")
    assert runs == ["mark_paid", "mark_paid", "send_sms"]
    assert paid_rows() == 1  # committed together with the step's record
    fail["sms"] = False
    assert pay("o1") == ["paid", "sent"]
    assert runs == ["mark_paid", "mark_paid", "send_sms", "send_sms"]
    assert paid_rows() == 1


def test_a_step_on_a_connection_needs_a_sql_store() -> None:
    guard = Guard(MemoryStore())
    engine = sa.create_engine("sqlite://")

    @guard.step("mark_paid", conn="conn")
    def mark_paid(conn: Any) -> str:
        return "paid"

    @guard.operation("pay", key="{order}")
    def pay(order: str) -> str:
        with engine.begin() as conn:
            return mark_paid(conn)

    with pytest.raises(ConfigurationError, match="SQL store"):
        pay("o1")


def test_a_transactional_step_on_an_autocommit_connection_is_refused_before_it_runs(
    sql: tuple[Opened, Any, str],
) -> None:
    """Each statement of an AUTOCOMMIT connection commits on its own: the step's record would
    commit apart from its writes, and a failure between them would leave writes without a
    record (run again) or a record without writes. Refused before the step runs."""
    opened, engine, orders = sql
    guard, scope = Guard(opened.store, lease=30), f"pay-{uuid.uuid4().hex[:6]}"
    runs: list[str] = []

    @guard.step("mark_paid", conn="conn")
    def mark_paid(conn: Any, order: str) -> str:
        runs.append("mark_paid")
        conn.execute(sa.text(f"INSERT INTO {orders} VALUES (:id, 'PAID')"), {"id": order})
        return "paid"

    @guard.operation(scope, key="{order}")
    def pay(order: str) -> str:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            return mark_paid(conn, order)

    with pytest.raises(ConfigurationError, match="AUTOCOMMIT"):
        pay("o1")
    assert runs == []
    with engine.connect() as conn:
        assert conn.execute(sa.text(f"SELECT count(*) FROM {orders}")).scalar_one() == 0
