"""The recipes of docs/state.md.

``take_stock``: the idempotency record and the stock decrement in one transaction; run as a
script it is a process that stops at a chosen point (after the decrement, before the commit;
or after the commit, before answering) and waits there to be killed. ``verdict``: what a
consumer does with a state machine's event that may come twice or out of order.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Table, create_engine

from mideng import Guard, open_store
from mideng.state import AlreadyThere, Applied, Direction, Illegal, decrement


class OutOfStock(Exception):
    pass


def take_stock(
    guard: Guard,
    conn: Any,
    stock: Table,
    order_no: str,
    sku: str,
    qty: int,
    pause: Callable[[str], None] = lambda point: None,
) -> Any:
    """Take ``qty`` of ``sku`` for ``order_no`` once, however often the order is retried."""
    with guard.transaction(conn, "stock-take", order_no, payload={"sku": sku, "qty": qty}) as tx:
        if tx.replayed:
            return tx.result
        taken = decrement(conn, stock, {"sku": sku}, "qty", qty)
        if not taken.ok:
            raise OutOfStock(f"{sku}: {taken}")  # rolls back the record too: a retry may run
        tx.set_result({"order": order_no, "sku": sku, "taken": qty})
        pause("decremented")
    pause("committed")
    return tx.value


def verdict(answer: Any) -> str:
    """ack, retry or alert: what a consumer does with an event once ``advance`` answered."""
    match answer:
        case Applied() | AlreadyThere():
            return "ack"  # applied now (its work done first), or a duplicate
        case Illegal(direction=Direction.BEHIND):
            return "ack"  # late: the row is past that state already
        case Illegal(direction=Direction.AHEAD):
            return "retry"  # early: the events before it have not come yet
        case _:
            return "alert"  # another branch, a cycle, or a row nobody created


def main() -> int:
    url, record_table, suffix, order_no, sku, stop_at, workdir = sys.argv[1:8]
    from tests.state.storm import tables

    stock = tables(suffix)["stock"]
    store = open_store(url, table=record_table)
    guard = Guard(store, lease=30)
    engine = create_engine(url)

    def pause(point: str) -> None:
        if point == stop_at:
            (Path(workdir) / point).write_text("here")
            time.sleep(300)  # killed here

    with engine.connect() as conn:
        take_stock(guard, conn, stock, order_no, sku, 1, pause)
    return 0


if __name__ == "__main__":
    sys.exit(main())
