"""decrement with values of odd types, on SQLite, PostgreSQL and MariaDB, sync and async, in the
caller's transaction and in autocommit use: a NULL in the column is Insufficient (it holds no
amount), a NaN or a fraction of an integer column is refused before anything is sent (the
database would round or reject it: Applied with nothing or too much taken, or the caller's
transaction aborted), and a whole Decimal or float is taken from an integer column as the
integer it is."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, Numeric, String, Table

from mideng.errors import ConfigurationError
from mideng.state import Applied, Insufficient
from tests.state.sides import Db, Side, using


@pytest.fixture(scope="module")
def odd(db: Db) -> Iterator[dict[str, Table]]:
    """A stock with a nullable integer column and one with a Numeric column."""
    metadata = MetaData()
    suffix = uuid.uuid4().hex[:10]
    tables = {
        "nullable": Table(
            f"odd_nullable_{suffix}",
            metadata,
            Column("sku", String(40), primary_key=True),
            Column("qty", Integer, nullable=True),
        ),
        "numeric": Table(
            f"odd_numeric_{suffix}",
            metadata,
            Column("sku", String(40), primary_key=True),
            Column("qty", Numeric(10, 2), nullable=False),
        ),
    }
    metadata.create_all(db.engine)
    yield tables
    metadata.drop_all(db.engine)


def _seed(db: Db, table: Table, qty: Any) -> str:
    sku = f"sku-{uuid.uuid4().hex[:12]}"
    with db.engine.begin() as conn:
        conn.execute(table.insert().values(sku=sku, qty=qty))
    return sku


def test_a_null_column_holds_too_little(
    db: Db, side: Side, mode: str, odd: dict[str, Table]
) -> None:
    stock = odd["nullable"]
    sku = _seed(db, stock, None)
    with using(side, mode) as conn:
        assert side.decrement(conn, stock, {"sku": sku}, "qty", 1) == Insufficient(None)
    assert [r["qty"] for r in db.rows(stock, sku=sku)] == [None]


@pytest.mark.parametrize(
    "amount",
    [0.5, Decimal("1.5"), float("nan"), Decimal("NaN"), float("inf"), Decimal("Infinity")],
    ids=["half", "decimal-fraction", "nan", "decimal-nan", "inf", "decimal-inf"],
)
def test_what_an_integer_column_cannot_take_is_refused(
    db: Db, side: Side, mode: str, amount: Any
) -> None:
    stock = db.tables["stock"]
    sku = _seed(db, stock, 3)
    with using(side, mode) as conn:
        with side.counted() as sent, pytest.raises(ConfigurationError, match="amount"):
            side.decrement(conn, stock, {"sku": sku}, "qty", amount)
        assert sent == []
    assert [r["qty"] for r in db.rows(stock, sku=sku)] == [3]


@pytest.mark.parametrize("amount", [float("nan"), Decimal("NaN"), Decimal("sNaN")])
def test_a_nan_is_refused_on_a_numeric_column(
    db: Db, side: Side, odd: dict[str, Table], amount: Any
) -> None:
    stock = odd["numeric"]
    sku = _seed(db, stock, Decimal("3.00"))
    with using(side, "caller") as conn:
        with side.counted() as sent, pytest.raises(ConfigurationError, match="amount"):
            side.decrement(conn, stock, {"sku": sku}, "qty", amount)
        assert sent == []


def test_a_whole_decimal_or_float_is_taken_from_an_integer_column(
    db: Db, side: Side, mode: str
) -> None:
    stock = db.tables["stock"]
    sku = _seed(db, stock, 5)
    with using(side, mode) as conn:
        assert side.decrement(conn, stock, {"sku": sku}, "qty", Decimal("2")) == Applied()
        assert side.decrement(conn, stock, {"sku": sku}, "qty", 2.0) == Applied()
        assert side.decrement(conn, stock, {"sku": sku}, "qty", Decimal("2.00")) == Insufficient(1)
    assert [r["qty"] for r in db.rows(stock, sku=sku)] == [1]


def test_a_fraction_is_taken_from_a_numeric_column(
    db: Db, side: Side, odd: dict[str, Table]
) -> None:
    stock = odd["numeric"]
    sku = _seed(db, stock, Decimal("3.00"))
    with using(side, "autocommit") as conn:
        assert side.decrement(conn, stock, {"sku": sku}, "qty", Decimal("0.50")) == Applied()
        assert side.decrement(conn, stock, {"sku": sku}, "qty", Decimal("3")) == Insufficient(
            Decimal("2.50")
        )
    assert [r["qty"] for r in db.rows(stock, sku=sku)] == [Decimal("2.50")]
