"""decrement and update_versioned on SQLite, PostgreSQL and MariaDB, sync and async, in the
caller's transaction and in autocommit use: one UPDATE when it applies, a read only when it
does not; what they refuse before sending anything."""

from __future__ import annotations

import uuid

import pytest

from mideng.errors import ConfigurationError
from mideng.state import Applied, Conflict, Insufficient, Missing
from tests.state.conftest import new_key, seed_order, seed_stock
from tests.state.sides import Db, Side, using


def _sku() -> str:
    return f"sku-{uuid.uuid4().hex[:12]}"


def test_decrement_answers(db: Db, side: Side, mode: str) -> None:
    stock, sku = db.tables["stock"], _sku()
    seed_stock(db, sku, 5)
    where = {"sku": sku}
    with using(side, mode) as conn:
        with side.counted() as sent:
            assert side.decrement(conn, stock, where, "qty", 3) == Applied()
        assert len(sent) == 1
        with side.counted() as sent:
            short = side.decrement(conn, stock, where, "qty", 3)
        assert short == Insufficient(2)
        assert not short.ok
        assert len(sent) == 2
        assert side.decrement(conn, stock, where, "qty", 2) == Applied()
        assert side.decrement(conn, stock, where, "qty", 1) == Insufficient(0)
        assert side.decrement(conn, stock, {"sku": _sku()}, "qty", 1) == Missing()
    assert [r["qty"] for r in db.rows(stock, sku=sku)] == [0]


def test_a_decrement_rolls_back_with_the_callers_transaction(db: Db, side: Side) -> None:
    stock, sku = db.tables["stock"], _sku()
    seed_stock(db, sku, 5)
    conn = side.connect()
    side.begin(conn)
    assert side.decrement(conn, stock, {"sku": sku}, "qty", 4) == Applied()
    assert side.decrement(conn, stock, {"sku": sku}, "qty", 4) == Insufficient(1)
    side.rollback(conn)
    side.release(conn)
    assert [r["qty"] for r in db.rows(stock, sku=sku)] == [5]


def test_update_versioned_answers(db: Db, side: Side, mode: str) -> None:
    orders, key = db.tables["orders"], new_key()
    seed_order(db, key)
    where = {"order_no": key}
    with using(side, mode) as conn:
        with side.counted() as sent:
            got = side.update_versioned(conn, orders, where, {"amount": 12}, version=0)
        assert got == Applied(1)
        assert len(sent) == 1
        with side.counted() as sent:
            stale = side.update_versioned(conn, orders, where, {"amount": 99}, version=0)
        assert stale == Conflict(1)
        assert len(sent) == 2
        assert side.update_versioned(conn, orders, where, {"note": "n"}, version=1) == Applied(2)
        missing = side.update_versioned(
            conn, orders, {"order_no": new_key()}, {"amount": 1}, version=0
        )
        assert missing == Missing()
    [row] = db.rows(orders, order_no=key)
    assert (row["amount"], row["note"], row["version"]) == (12, "n", 2)


def test_bad_arguments_are_refused_before_any_statement(db: Db, side: Side) -> None:
    orders, stock = db.tables["orders"], db.tables["stock"]
    conn = side.connect()
    with side.counted() as sent:
        for amount in (0, -1, True, "1", None):
            with pytest.raises(ConfigurationError, match="positive number"):
                side.decrement(conn, stock, {"sku": "a"}, "qty", amount)
        with pytest.raises(ConfigurationError, match="no column 'weight'"):
            side.decrement(conn, stock, {"sku": "a"}, "weight", 1)
        with pytest.raises(ConfigurationError, match="does not pick one row"):
            side.decrement(conn, stock, {"qty": 1}, "qty", 1)
        with pytest.raises(ConfigurationError, match="version column"):
            side.update_versioned(conn, orders, {"id": 1}, {"version": 5}, version=1)
        with pytest.raises(ConfigurationError, match="the version read before"):
            side.update_versioned(conn, orders, {"id": 1}, {"amount": 5}, version="1")
        with pytest.raises(ConfigurationError, match="no columns"):
            side.update_versioned(conn, orders, {"id": 1}, {}, version=1)
        with pytest.raises(ConfigurationError, match="no version column 'rev'"):
            side.update_versioned(conn, orders, {"id": 1}, {"amount": 5}, version=1, column="rev")
    assert sent == []
    side.release(conn)
