"""insert_once on SQLite, PostgreSQL and MariaDB, sync and async, in the caller's transaction
and in autocommit use: one statement for a new row; a duplicate answers the stored row (two
statements, a WARNING with the business key) and leaves the caller's transaction usable;
other errors stay errors."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError, IntegrityError

from mideng.errors import ConfigurationError
from mideng.state import Existing, Inserted
from tests.state.conftest import new_key
from tests.state.sides import Db, Side, using


def test_a_new_row_is_one_statement(db: Db, side: Side, mode: str) -> None:
    orders, key = db.tables["orders"], new_key()
    with using(side, mode) as conn, side.counted() as sent:
        got = side.insert_once(conn, orders, {"order_no": key, "amount": 10}, unique=["order_no"])
    assert len(sent) == 1
    assert isinstance(got, Inserted)
    assert got.ok
    stored = db.rows(orders, order_no=key)
    assert len(stored) == 1
    # The row as stored: the generated id and the server defaults come back with it.
    assert got.row["id"] == stored[0]["id"]
    assert got.row["order_no"] == key
    assert got.row["amount"] == 10
    assert got.row["status"] == "NEW"
    assert got.row["version"] == 0


def test_a_duplicate_answers_the_stored_row_and_warns(
    db: Db, side: Side, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    orders, key = db.tables["orders"], new_key()
    conn = side.connect()
    first = side.insert_once(conn, orders, {"order_no": key, "amount": 10}, unique="order_no")
    side.release(conn)
    assert isinstance(first, Inserted)
    with (
        caplog.at_level(logging.WARNING, logger="mideng"),
        using(side, mode) as conn,
        side.counted() as sent,
    ):
        again = side.insert_once(conn, orders, {"order_no": key, "amount": 99}, unique="order_no")
    assert len(sent) == 2  # the insert that met the key, the read of the stored row
    assert isinstance(again, Existing)
    assert again.ok
    assert again.row["id"] == first.row["id"]
    assert again.row["amount"] == 10  # the stored row, not the retry's values
    assert db.rows(orders, order_no=key) == [dict(again.row)]
    warned = [r for r in caplog.records if "duplicate insert" in r.getMessage()]
    assert len(warned) == 1
    assert key in warned[0].getMessage()
    assert orders.name in warned[0].getMessage()


def test_a_duplicate_keeps_the_callers_earlier_writes(db: Db, side: Side) -> None:
    """In the caller's transaction, a duplicate is not an error that undoes what the caller
    wrote before it: both the caller's insert and the duplicate's read commit together."""
    orders, key, mine = db.tables["orders"], new_key(), new_key()
    conn = side.connect()
    side.insert_once(conn, orders, {"order_no": key, "amount": 1}, unique="order_no")
    side.begin(conn)
    side.execute(conn, f"INSERT INTO {orders.name} (order_no, amount) VALUES (:o, 5)", {"o": mine})
    got = side.insert_once(conn, orders, {"order_no": key, "amount": 2}, unique="order_no")
    assert isinstance(got, Existing)
    side.execute(conn, f"UPDATE {orders.name} SET note = 'after' WHERE order_no = :o", {"o": mine})
    side.commit(conn)
    side.release(conn)
    assert [r["note"] for r in db.rows(orders, order_no=mine)] == ["after"]


def test_a_clash_on_another_unique_key_is_still_an_error(db: Db, side: Side) -> None:
    """Only a duplicate of the named key is an answer; reusing another row's primary key is a
    bug, reported as the database's error, and nothing is stored."""
    orders, key = db.tables["orders"], new_key()
    conn = side.connect()
    first = side.insert_once(conn, orders, {"order_no": key, "amount": 1}, unique="order_no")
    other = new_key()
    with pytest.raises(IntegrityError):
        side.insert_once(
            conn, orders, {"id": first.row["id"], "order_no": other, "amount": 1}, unique="order_no"
        )
    assert not conn.in_transaction()  # its own transaction, rolled back
    side.release(conn)
    assert db.rows(orders, order_no=other) == []


def test_what_insert_ignore_would_store_is_refused(db: Db, side: Side) -> None:
    """The MySQL/MariaDB form is a plain INSERT: a NULL into a NOT NULL column, or (MariaDB's
    strict mode) a value too long for its column, fails as it would without insert_once.
    INSERT IGNORE would store a default or a truncated value and answer "inserted"."""
    orders = db.tables["orders"]
    conn = side.connect()
    nulled = new_key()
    with pytest.raises(IntegrityError):
        side.insert_once(conn, orders, {"order_no": nulled, "amount": None}, unique="order_no")
    long = "x" * 41
    if db.name == "mysql":  # the others do not check a VARCHAR's length
        with pytest.raises(DBAPIError):
            side.insert_once(conn, orders, {"order_no": long, "amount": 1}, unique="order_no")
    assert not conn.in_transaction()
    side.release(conn)
    assert db.rows(orders, order_no=nulled) == []
    assert db.rows(orders, order_no=long) == []
    assert db.rows(orders, order_no=long[:40]) == []


def test_bad_arguments_are_refused_before_any_statement(db: Db, side: Side) -> None:
    orders = db.tables["orders"]
    conn = side.connect()
    with side.counted() as sent:
        with pytest.raises(ConfigurationError, match="no column 'colour'"):
            side.insert_once(conn, orders, {"order_no": "x", "colour": 1}, unique="order_no")
        with pytest.raises(ConfigurationError, match="not a unique key"):
            side.insert_once(conn, orders, {"order_no": "x", "amount": 1}, unique="amount")
        with pytest.raises(ConfigurationError, match="must name columns given"):
            side.insert_once(conn, orders, {"amount": 1}, unique="order_no")
        with pytest.raises(ConfigurationError, match="no columns"):
            side.insert_once(conn, orders, {}, unique="order_no")
        with pytest.raises(ConfigurationError, match="needs a value"):
            side.insert_once(conn, orders, {"order_no": None, "amount": 1}, unique="order_no")
    assert sent == []
    assert not conn.in_transaction()
    side.release(conn)


def test_a_row_deleted_before_its_read_back_is_inserted_again(
    db: Db, side: Side, mode: str
) -> None:
    """The insert meets the key, and the row is deleted before the read that would answer
    it: the read finds nothing, so the insert is sent again and answers Inserted (the caller's
    transaction, where the first insert is sent without an operation, included)."""
    orders, key = db.tables["orders"], new_key()
    conn = side.connect()
    side.insert_once(conn, orders, {"order_no": key, "amount": 1}, unique="order_no")
    side.release(conn)
    mark = "%s" if db.name != "sqlite" else "?"
    deleted: list[str] = []

    def delete_first(_conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        # The read-back of the key, on the same connection and in the same transaction: the
        # row goes just before it, as a concurrent DELETE committed in between would.
        if statement.lstrip().upper().startswith("SELECT") and not deleted:
            deleted.append(statement)
            cursor.execute(f"DELETE FROM {orders.name} WHERE order_no = {mark}", (key,))

    engine = side._sync_engine()
    event.listen(engine, "before_cursor_execute", delete_first)
    try:
        with using(side, mode) as conn, side.counted() as sent:
            got = side.insert_once(conn, orders, {"order_no": key, "amount": 7}, unique="order_no")
    finally:
        event.remove(engine, "before_cursor_execute", delete_first)
    assert deleted, "the read-back never ran"
    assert [s.lstrip().split()[0].upper() for s in sent] == ["INSERT", "SELECT", "INSERT"]
    assert isinstance(got, Inserted)
    assert got.row["amount"] == 7
    assert db.rows(orders, order_no=key) == [dict(got.row)]


def test_a_clash_on_another_key_in_the_callers_transaction_is_raised(db: Db, side: Side) -> None:
    """Inside the caller's open transaction too, reusing another row's primary key is the
    database's error (the insert is the caller's own statement, so their transaction decides
    what happens next), never an Existing; rolled back, nothing of it is stored."""
    orders, key = db.tables["orders"], new_key()
    conn = side.connect()
    first = side.insert_once(conn, orders, {"order_no": key, "amount": 1}, unique="order_no")
    other = new_key()
    side.begin(conn)
    with pytest.raises(IntegrityError):
        side.insert_once(
            conn, orders, {"id": first.row["id"], "order_no": other, "amount": 1}, unique="order_no"
        )
    side.rollback(conn)
    side.release(conn)
    assert db.rows(orders, order_no=other) == []
