"""StateMachine: what a declaration is refused for, and advance on SQLite, PostgreSQL and
MariaDB, sync and async, in the caller's transaction and in autocommit use. One UPDATE when the
row moves; a read only when it does not, to tell a duplicate from an illegal transition or a
missing row."""

from __future__ import annotations

import enum

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table
from sqlalchemy import Enum as SQLEnum

from mideng.errors import ConfigurationError
from mideng.state import (
    AlreadyThere,
    Applied,
    Conflict,
    Direction,
    Illegal,
    Missing,
    StateMachine,
)
from tests.state.conftest import new_key, seed_order
from tests.state.sides import Db, Side, using

ORDER_FLOW = {
    "NEW": ["PAID", "CANCELLED"],
    "PAID": ["SHIPPED", "REFUNDED"],
    "SHIPPED": ["DONE"],
}


class Pay(enum.Enum):
    NEW = "NEW"
    PAID = "PAID"
    REFUNDED = "REFUNDED"


# -- the declaration ---------------------------------------------------------------------------
def test_states_targets_sources_and_terminals() -> None:
    flow = StateMachine(ORDER_FLOW, initial="NEW", terminal=["DONE", "CANCELLED"])
    assert set(flow.states) == {"NEW", "PAID", "SHIPPED", "DONE", "CANCELLED", "REFUNDED"}
    assert flow.allowed("NEW") == {"PAID", "CANCELLED"}
    assert flow.allowed("DONE") == frozenset()
    assert flow.sources("SHIPPED") == {"PAID"}
    assert flow.sources("NEW") == frozenset()
    assert flow.terminal == {"DONE", "CANCELLED", "REFUNDED"}
    assert flow.reachable("PAID") == {"SHIPPED", "REFUNDED", "DONE"}
    assert flow.reachable("NEW") == set(flow.states) - {"NEW"}
    assert flow.reachable("DONE") == frozenset()
    # A state is among those it reaches only when a cycle leads back to it.
    loop = StateMachine({"OPEN": ["CLOSED"], "CLOSED": ["OPEN", "ARCHIVED"]}, initial="OPEN")
    assert loop.reachable("OPEN") == {"OPEN", "CLOSED", "ARCHIVED"}
    for ask in (flow.allowed, flow.sources, flow.reachable):
        with pytest.raises(ConfigurationError, match="not a state"):
            ask("LOST")


def test_declarations_that_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="not states of Pay"):
        StateMachine({Pay.NEW: [Pay.PAID, "SHIPPED"]})
    with pytest.raises(ConfigurationError, match=r"\['ORPHAN'\] are unreachable from 'NEW'"):
        StateMachine({"NEW": ["PAID"], "ORPHAN": ["PAID"]}, initial="NEW")
    # With an Enum every member is a state, so a member no edge reaches is unreachable too.
    with pytest.raises(ConfigurationError, match="unreachable"):
        StateMachine({Pay.NEW: [Pay.PAID]}, initial=Pay.NEW)
    with pytest.raises(ConfigurationError, match="declared terminal but leads to"):
        StateMachine(ORDER_FLOW, terminal=["SHIPPED"])
    with pytest.raises(ConfigurationError, match="not a state"):
        StateMachine(ORDER_FLOW, initial="LOST")
    with pytest.raises(ConfigurationError, match="strings or members of one Enum"):
        StateMachine({1: [2]})
    with pytest.raises(ConfigurationError, match="at least one"):
        StateMachine({})
    # An Enum machine whose members are all reachable is fine.
    flow = StateMachine({Pay.NEW: [Pay.PAID], Pay.PAID: [Pay.REFUNDED]}, initial=Pay.NEW)
    assert flow.terminal == {Pay.REFUNDED}


# -- advance -----------------------------------------------------------------------------------
def test_advance_answers(db: Db, side: Side, mode: str) -> None:
    orders, flow = db.tables["orders"], StateMachine(ORDER_FLOW, initial="NEW")
    key = new_key()
    seed_order(db, key)
    where = {"order_no": key}
    with using(side, mode) as conn:
        with side.counted() as sent:
            assert side.advance(flow, conn, orders, where, "PAID") == Applied()
        assert len(sent) == 1
        with side.counted() as sent:
            assert side.advance(flow, conn, orders, where, "PAID") == AlreadyThere()
        assert len(sent) == 2
        with side.counted() as sent:
            assert side.advance(flow, conn, orders, where, "CANCELLED") == Illegal(
                "PAID", Direction.ASIDE
            )
            assert side.advance(flow, conn, orders, {"order_no": new_key()}, "PAID") == Missing()
        assert len(sent) == 4
    assert [r["status"] for r in db.rows(orders, order_no=key)] == ["PAID"]


def test_advance_with_a_version_and_more_columns(db: Db, side: Side, mode: str) -> None:
    orders, flow = db.tables["orders"], StateMachine(ORDER_FLOW)
    key = new_key()
    seed_order(db, key, status="PAID")
    where = {"order_no": key}
    with using(side, mode) as conn:
        with side.counted() as sent:
            got = side.advance(
                flow, conn, orders, where, "SHIPPED", version=0, values={"note": "parcel 7"}
            )
        assert got == Applied(1)
        assert len(sent) == 1
        # A stale version on a duplicate is still a duplicate; on a legal move it is a conflict.
        assert side.advance(flow, conn, orders, where, "SHIPPED", version=0) == AlreadyThere()
        assert side.advance(flow, conn, orders, where, "DONE", version=0) == Conflict(1)
        assert side.advance(flow, conn, orders, where, "DONE", version=1) == Applied(2)
    [row] = db.rows(orders, order_no=key)
    assert (row["status"], row["version"], row["note"]) == ("DONE", 2, "parcel 7")


def test_the_file_record_case(db: Db, side: Side, mode: str) -> None:
    """A file record goes INIT -> PROCESSING once. A redelivered message finds it already
    PROCESSING (a duplicate: skip it) or past it (a late copy: skip it too); an id nobody
    created is a message to alert on."""
    orders = db.tables["orders"]
    files = StateMachine(
        {"INIT": ["PROCESSING"], "PROCESSING": ["DONE", "FAILED"]},
        initial="INIT",
        terminal=["DONE", "FAILED"],
    )
    key = new_key()
    seed_order(db, key, status="INIT")
    where = {"order_no": key}
    with using(side, mode) as conn:
        assert side.advance(files, conn, orders, where, "PROCESSING") == Applied()
        assert side.advance(files, conn, orders, where, "PROCESSING") == AlreadyThere()
        assert side.advance(files, conn, orders, where, "DONE") == Applied()
        late = side.advance(files, conn, orders, where, "PROCESSING")
        assert late == Illegal("DONE", Direction.BEHIND)
        unknown = side.advance(files, conn, orders, {"order_no": "never-created"}, "PROCESSING")
        assert unknown == Missing()
        assert not unknown.ok


def test_enum_states_over_a_string_column_and_an_enum_column(db: Db, side: Side) -> None:
    flow = StateMachine({Pay.NEW: [Pay.PAID], Pay.PAID: [Pay.REFUNDED]}, initial=Pay.NEW)
    orders = db.tables["orders"]
    key = new_key()
    seed_order(db, key)
    conn = side.connect()
    assert side.advance(flow, conn, orders, {"order_no": key}, Pay.PAID) == Applied()
    assert side.advance(flow, conn, orders, {"order_no": key}, Pay.PAID) == AlreadyThere()
    side.release(conn)
    assert [r["status"] for r in db.rows(orders, order_no=key)] == ["PAID"]
    # The same machine over a SQLAlchemy Enum column: the column binds the members itself.
    metadata = MetaData()
    typed = Table(
        orders.name,
        metadata,
        Column("id", Integer, primary_key=True),
        Column("order_no", String(40), unique=True),
        Column("status", SQLEnum(Pay, native_enum=False, length=20)),
    )
    conn = side.connect()
    assert side.advance(flow, conn, typed, {"order_no": key}, Pay.REFUNDED) == Applied()
    answer = side.advance(flow, conn, typed, {"order_no": key}, Pay.PAID)
    assert answer == Illegal(Pay.REFUNDED, Direction.BEHIND)
    # The initial member, which no transition leads to: the read alone, decoded alike.
    answer = side.advance(flow, conn, typed, {"order_no": key}, Pay.NEW)
    assert answer == Illegal(Pay.REFUNDED, Direction.BEHIND)
    assert side.advance(flow, conn, orders, {"order_no": key}, Pay.NEW) == answer
    side.release(conn)


def test_bad_arguments_are_refused_before_any_statement(db: Db, side: Side) -> None:
    orders, flow = db.tables["orders"], StateMachine(ORDER_FLOW, initial="NEW")
    conn = side.connect()
    with side.counted() as sent:
        with pytest.raises(ConfigurationError, match="does not pick one row"):
            side.advance(flow, conn, orders, {"amount": 10}, "PAID")
        # Refused alike whether the target is one an UPDATE leads to or, like NEW, not.
        for to in ("PAID", "NEW"):
            with pytest.raises(ConfigurationError, match="set by the primitive itself"):
                side.advance(flow, conn, orders, {"order_no": "x"}, to, values={"status": "X"})
            with pytest.raises(ConfigurationError, match="no column 'colour'"):
                side.advance(flow, conn, orders, {"order_no": "x"}, to, values={"colour": 1})
            with pytest.raises(ConfigurationError, match="does not pick one row"):
                side.advance(flow, conn, orders, {"amount": 10}, to)
        with pytest.raises(ConfigurationError, match="not a state"):
            side.advance(flow, conn, orders, {"order_no": "x"}, "LOST")
        with pytest.raises(ConfigurationError, match="None never matches"):
            side.advance(flow, conn, orders, {"order_no": None}, "PAID")
        with pytest.raises(ConfigurationError, match="no column 'colour'"):
            side.advance(flow, conn, orders, {"colour": 1}, "PAID")
        with pytest.raises(ConfigurationError, match="version"):
            side.advance(flow, conn, orders, {"order_no": "x"}, "PAID", version="1")
        other = StateMachine(ORDER_FLOW, column="phase")
        with pytest.raises(ConfigurationError, match="no column 'phase'"):
            side.advance(other, conn, orders, {"order_no": "x"}, "PAID")
    assert sent == []
    side.release(conn)
