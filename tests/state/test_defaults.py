"""The table's column defaults and onupdate values, as Core's ``table.insert()`` and
``table.update()`` apply them: on SQLite, PostgreSQL and MariaDB, sync and async, in the
caller's transaction and in autocommit use. The values land in the row (read back), each
Python callable runs once per call, a value the caller gives wins, and the primitive still
sends one statement."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import (
    Column,
    DateTime,
    Integer,
    MetaData,
    Sequence,
    String,
    Table,
    func,
    literal_column,
)

from mideng.state import Applied, Existing, Inserted, StateMachine
from tests.state.conftest import new_key
from tests.state.sides import Db, Side, using

CALLS: Counter[str] = Counter()
EPOCH = datetime(2001, 2, 3, 4, 5, 6)


def _new_id() -> str:  # a zero-argument callable, like uuid4
    CALLS["id"] += 1
    return str(uuid.uuid4())


def _label(context: Any) -> str:  # a context-sensitive one
    CALLS["label"] += 1
    return f"label-{context.get_current_parameters()['order_no']}"


def _stamp() -> datetime:  # a distinct time per call, whole seconds for MariaDB's DATETIME
    CALLS["stamp"] += 1
    return EPOCH + timedelta(seconds=CALLS["stamp"])


@pytest.fixture(scope="module")
def ledger(db: Db) -> Iterator[Table]:
    metadata = MetaData()
    suffix = uuid.uuid4().hex[:10]
    table = Table(
        f"ledger_{suffix}",
        metadata,
        Column("id", String(36), primary_key=True, default=_new_id),
        Column("order_no", String(40), nullable=False, unique=True),
        Column("status", String(20), nullable=False, default="NEW"),
        Column("qty", Integer, nullable=False, default=100),
        Column("version", Integer, nullable=False, default=0),
        Column("label", String(60), default=_label),
        Column("created_at", DateTime, default=func.now()),
        Column("serial", Integer, Sequence(f"ledger_serial_{suffix}")),
        Column("updated_at", DateTime, onupdate=_stamp),
        # A SQL expression with a bound value of its own (the 1).
        Column(
            "revisions",
            Integer,
            nullable=False,
            server_default="0",
            onupdate=literal_column("revisions", Integer) + 1,
        ),
    )
    metadata.create_all(db.engine)
    yield table
    metadata.drop_all(db.engine)


FLOW = StateMachine({"NEW": ["PAID"], "PAID": ["SHIPPED"]})


def _insert(side: Side, conn: Any, table: Table, **values: Any) -> Any:
    return side.insert_once(conn, table, {"order_no": new_key(), **values}, unique="order_no")


def test_insert_once_applies_the_columns_defaults(
    db: Db, ledger: Table, side: Side, mode: str
) -> None:
    before = CALLS.copy()
    with using(side, mode) as conn:
        with side.counted() as sent:
            made = _insert(side, conn, ledger)
        assert len(sent) == 1
    assert isinstance(made, Inserted)
    assert CALLS - before == Counter(id=1, label=1)
    key = made.row["order_no"]
    [row] = db.rows(ledger, order_no=key)
    assert row["id"] == made.row["id"]
    assert uuid.UUID(row["id"])
    assert (row["status"], row["qty"], row["version"]) == ("NEW", 100, 0)
    assert row["label"] == f"label-{key}"
    assert row["created_at"] is not None
    assert (row["serial"] is not None) == db.engine.dialect.supports_sequences
    assert row["updated_at"] is None  # an onupdate, not a default
    assert made.row == row


def test_a_value_given_wins_over_the_default(db: Db, ledger: Table, side: Side) -> None:
    before = CALLS.copy()
    given = {"id": str(uuid.uuid4()), "label": "mine", "status": "PAID", "qty": 7}
    with using(side, "autocommit") as conn:
        made = _insert(side, conn, ledger, **given)
    assert isinstance(made, Inserted)
    assert CALLS - before == Counter()
    [row] = db.rows(ledger, order_no=made.row["order_no"])
    assert {k: row[k] for k in given} == given


def test_a_duplicate_answers_the_row_stored_with_its_defaults(
    db: Db, ledger: Table, side: Side, mode: str
) -> None:
    key = new_key()
    with using(side, mode) as conn:
        first = side.insert_once(conn, ledger, {"order_no": key}, unique="order_no")
        again = side.insert_once(conn, ledger, {"order_no": key}, unique="order_no")
    assert isinstance(first, Inserted)
    assert isinstance(again, Existing)
    assert again.row["id"] == first.row["id"]
    assert [r["id"] for r in db.rows(ledger, order_no=key)] == [first.row["id"]]


def _seeded(db: Db, ledger: Table) -> str:
    """A row inserted by Core itself, so that only the primitives' updates are under test."""
    key = new_key()
    with db.engine.begin() as conn:
        conn.execute(ledger.insert().values(order_no=key))
    return key


def test_each_update_applies_the_columns_onupdate(
    db: Db, ledger: Table, side: Side, mode: str
) -> None:
    key = _seeded(db, ledger)
    where = {"order_no": key}
    seen: list[int] = []
    with using(side, mode) as conn:
        updates: list[Callable[[], Any]] = [
            lambda: side.decrement(conn, ledger, where, "qty", 3),
            lambda: side.update_versioned(conn, ledger, where, {"label": "x"}, version=0),
            lambda: side.advance(FLOW, conn, ledger, where, "PAID"),
        ]
        for update in updates:
            before = CALLS["stamp"]
            with side.counted() as sent:
                assert isinstance(update(), Applied)
            assert len(sent) == 1
            assert CALLS["stamp"] == before + 1
            seen.append(CALLS["stamp"])
            if mode == "autocommit":  # committed: another connection reads it
                [row] = db.rows(ledger, order_no=key)
                assert row["updated_at"] == EPOCH + timedelta(seconds=seen[-1])
    [row] = db.rows(ledger, order_no=key)
    assert row["updated_at"] == EPOCH + timedelta(seconds=seen[-1])
    assert row["revisions"] == 3  # the SQL expression, once per UPDATE
    assert (row["qty"], row["label"], row["version"], row["status"]) == (97, "x", 1, "PAID")


def test_a_value_given_to_an_update_wins_over_onupdate(db: Db, ledger: Table, side: Side) -> None:
    key = _seeded(db, ledger)
    where = {"order_no": key}
    mine = datetime(1999, 12, 31, 23, 59, 59)
    before = CALLS["stamp"]
    with using(side, "caller") as conn:
        got = side.update_versioned(
            conn, ledger, where, {"updated_at": mine, "revisions": 40}, version=0
        )
        assert got == Applied(1)
        assert side.advance(FLOW, conn, ledger, where, "PAID", values={"updated_at": mine})
    assert CALLS["stamp"] == before
    [row] = db.rows(ledger, order_no=key)
    assert (row["updated_at"], row["revisions"]) == (mine, 41)


def test_shapes_with_and_without_the_column_given_are_kept_apart(
    db: Db, ledger: Table, side: Side
) -> None:
    """The kept statement is per set of column names: setting ``updated_at`` one call and
    leaving it to its onupdate the next must not reuse the other call's statement."""
    key = _seeded(db, ledger)
    where = {"order_no": key}
    mine = datetime(1999, 1, 1, 0, 0, 0)
    stamped = []
    with using(side, "caller") as conn:
        for version, values in enumerate(
            [{"label": "a"}, {"label": "b", "updated_at": mine}, {"label": "c"}]
        ):
            before = CALLS["stamp"]
            got = side.update_versioned(conn, ledger, where, values, version=version)
            assert got == Applied(version + 1)
            stamped.append(CALLS["stamp"] - before)
    assert stamped == [1, 0, 1]
    [row] = db.rows(ledger, order_no=key)
    assert row["updated_at"] == EPOCH + timedelta(seconds=CALLS["stamp"])
    assert (row["label"], row["version"], row["revisions"]) == ("c", 3, 3)
