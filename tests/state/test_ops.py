"""The operations' decisions, driven by hand: what each answer to each statement leads to,
including the interleavings a real database produces only under load (the row changes between
the statement and its read-back; a duplicate of another key; a row deleted in between)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table
from sqlalchemy.dialects import mysql, postgresql

from mideng.db import Op, Res, Stmt
from mideng.state import (
    AlreadyThere,
    Applied,
    Direction,
    Existing,
    Illegal,
    Inserted,
    Missing,
    StateMachine,
    ops,
)
from mideng.state.ops import RowKeptChangingError
from mideng.state.statements import insert_shape

metadata = MetaData()
POSTGRESQL: Any = postgresql.dialect()  # type: ignore[no-untyped-call]
ORDERS = Table(
    "orders_ops",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("order_no", String(40), unique=True),
    Column("status", String(20)),
)


class Row(tuple[Any, ...]):
    """A result row with the mapping view SQLAlchemy's rows have."""

    @property
    def _mapping(self) -> dict[str, Any]:
        return dict(zip(["id", "order_no", "status"], self, strict=True))


class Duplicate(Exception):
    def __init__(self) -> None:
        super().__init__(1062, "Duplicate entry 'o-1' for key 'PRIMARY'")


def play(op: Op[Any], answers: list[Res | BaseException]) -> tuple[Any, list[Stmt]]:
    """Drive ``op`` by hand: each statement it yields gets the next answer (a result, or an
    error thrown in as mideng.db.drive does); the answer and the statements sent."""
    sent = [next(op)]
    try:
        for answer in answers:
            if isinstance(answer, BaseException):
                sent.append(op.throw(answer))
            else:
                sent.append(op.send(answer))
    except StopIteration as stop:
        return stop.value, sent
    raise AssertionError(f"the operation wants more statements: {sent[-1]}")


def _advance(flow: StateMachine, to: str) -> Op[Any]:
    make = flow._advance(ORDERS, {"order_no": "o-1"}, to, None, None)
    return make(POSTGRESQL)


def test_a_row_that_changed_between_update_and_read_is_updated_again() -> None:
    flow = StateMachine({"NEW": ["PAID"], "PAID": ["SHIPPED"]})
    # 0 rows, the read finds NEW (a legal source: it was something else at the UPDATE).
    answer, sent = play(_advance(flow, "PAID"), [Res(0, ()), Res(1, [("NEW",)]), Res(1, ())])
    assert answer == Applied()
    assert [s.sql.text.split()[0] for s in sent] == ["UPDATE", "SELECT", "UPDATE"]


def test_a_row_that_keeps_changing_is_reported_after_a_few_rounds() -> None:
    flow = StateMachine({"NEW": ["PAID"]})
    answers: list[Res | BaseException] = [Res(0, ()), Res(1, [("NEW",)])] * ops.RACES
    with pytest.raises(RowKeptChangingError):
        play(_advance(flow, "PAID"), answers)


def test_a_read_back_decides_duplicate_and_illegal() -> None:
    flow = StateMachine({"NEW": ["PAID"], "PAID": ["SHIPPED"]})
    assert play(_advance(flow, "PAID"), [Res(0, ()), Res(1, [("PAID",)])])[0] == AlreadyThere()
    illegal = play(_advance(flow, "PAID"), [Res(0, ()), Res(1, [("SHIPPED",)])])[0]
    assert illegal == Illegal("SHIPPED", Direction.BEHIND)


def test_a_target_nothing_leads_to_is_one_read() -> None:
    flow = StateMachine({"NEW": ["PAID"], "PAID": ["SHIPPED"]})
    for found, expected in [
        ([("NEW",)], AlreadyThere()),
        ([("SHIPPED",)], Illegal("SHIPPED", Direction.BEHIND)),
        ([], Missing()),
    ]:
        answer, sent = play(_advance(flow, "NEW"), [Res(len(found), found)])
        assert answer == expected
        assert [s.sql.text.split()[0] for s in sent] == ["SELECT"]


def _insert(kind: str, dialect: Any) -> Op[Any]:
    shape = insert_shape(ORDERS, kind, dialect, ("order_no", "status"), ("order_no",))
    return ops.insert_once(shape, {"order_no": "o-1", "status": "NEW"}, dialect)


MARIADB: Any = mysql.dialect()


def test_mysql_a_duplicate_of_the_key_is_the_stored_row() -> None:
    answer, sent = play(_insert("mysql", MARIADB), [Duplicate(), Res(1, [Row((7, "o-1", "OLD"))])])
    assert answer == Existing({"id": 7, "order_no": "o-1", "status": "OLD"})
    assert "LOCK IN SHARE MODE" in sent[1].sql.text  # the latest row, not an old snapshot


def test_mysql_a_duplicate_of_another_key_is_raised() -> None:
    # No row under the key after the error: once, it may have been deleted in between, so
    # the insert is sent again; the same again is another key's clash.
    with pytest.raises(Duplicate):
        play(_insert("mysql", MARIADB), [Duplicate(), Res(0, []), Duplicate(), Res(0, [])])


def test_mysql_a_row_deleted_before_the_read_is_inserted_again() -> None:
    row = Res(1, [Row((8, "o-1", "NEW"))])
    answer, sent = play(_insert("mysql", MARIADB), [Duplicate(), Res(0, []), row])
    assert isinstance(answer, Inserted)
    assert [s.sql.text.split()[0] for s in sent] == ["INSERT", "SELECT", "INSERT"]


def test_any_other_error_is_raised_without_a_read() -> None:
    op = _insert("mysql", MARIADB)
    next(op)
    with pytest.raises(ValueError, match="boom"):
        op.throw(ValueError("boom"))


def test_mysql_a_new_row_gets_its_generated_id() -> None:
    answer, sent = play(_insert("mysql", MARIADB), [Res(1, (), lastrowid=41)])
    assert answer == Inserted({"order_no": "o-1", "status": "NEW", "id": 41})
    assert len(sent) == 1


def test_postgresql_a_conflicting_row_deleted_meanwhile_is_inserted_again() -> None:
    answers: list[Res | BaseException] = [Res(0, []), Res(0, []), Res(1, [Row((8, "o-1", "NEW"))])]
    answer, sent = play(_insert("postgresql", POSTGRESQL), answers)
    assert answer == Inserted({"id": 8, "order_no": "o-1", "status": "NEW"})
    assert "ON CONFLICT (order_no) DO NOTHING" in sent[0].sql.text
    assert [s.sql.text.split()[0] for s in sent] == ["INSERT", "SELECT", "INSERT"]
