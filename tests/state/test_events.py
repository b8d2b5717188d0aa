"""StateMachine.advance under events that come twice and out of order, on SQLite, PostgreSQL
and MariaDB, sync and async.

A target no transition leads to (the initial state) answers from the read of the row, as
any other target does after a miss: AlreadyThere, Illegal or Missing.
"""

from __future__ import annotations

from mideng.state import AlreadyThere, Illegal, Missing, StateMachine
from tests.state.conftest import new_key, seed_order
from tests.state.sides import Db, Side, using

ORDER_FLOW = {
    "NEW": ["PAID", "CANCELLED"],
    "PAID": ["SHIPPED", "REFUNDED"],
    "SHIPPED": ["DONE"],
}


def test_advance_to_the_initial_state_reads_the_row(db: Db, side: Side, mode: str) -> None:
    """Nothing leads to NEW, so no UPDATE could apply: one read answers, with or without a
    version and more columns, and writes nothing."""
    orders, flow = db.tables["orders"], StateMachine(ORDER_FLOW, initial="NEW")
    new, paid = new_key(), new_key()
    seed_order(db, new)
    seed_order(db, paid, status="PAID")
    with using(side, mode) as conn:
        with side.counted() as sent:
            assert side.advance(flow, conn, orders, {"order_no": new}, "NEW") == AlreadyThere()
            assert side.advance(flow, conn, orders, {"order_no": paid}, "NEW") == Illegal("PAID")
            assert side.advance(flow, conn, orders, {"order_no": new_key()}, "NEW") == Missing()
            again = side.advance(
                flow, conn, orders, {"order_no": new}, "NEW", version=3, values={"note": "x"}
            )
            assert again == AlreadyThere()
        assert len(sent) == 4
        assert all(s.lstrip().upper().startswith("SELECT") for s in sent)
    [row] = db.rows(orders, order_no=new)
    assert (row["status"], row["version"], row["note"]) == ("NEW", 0, None)
    assert [r["status"] for r in db.rows(orders, order_no=paid)] == ["PAID"]
