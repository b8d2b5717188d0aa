"""The payment platform's callback, as one transaction: the order UNPAID -> PAID, the
``order.paid`` event into the outbox, a ledger row. All commit together or none does."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from mideng.state import AlreadyThere, Applied
from shop.tables import ledger, order_flow, orders
from shop.wiring import outbox


class BadNotice(Exception):
    """A notice for no order, or with another amount: nothing is recorded, a corrected one runs."""


@dataclass(frozen=True)
class Notice:
    trade_no: str
    order: str
    amount: int


def record_payment(conn: Connection, notice: Notice) -> bool:
    """Mark the order paid and announce it; False when it was paid already (a duplicate that got
    past the HTTP key: a new key, or a record gone). ``conn`` is inside the caller's transaction."""
    row = conn.execute(select(orders).where(orders.c.number == notice.order)).mappings().first()
    if row is None:
        raise BadNotice(f"no order {notice.order}")
    if row["amount"] != notice.amount:
        raise BadNotice(f"order {notice.order} is {row['amount']}, not {notice.amount}")
    # One conditional UPDATE ... WHERE status = 'UNPAID': of two copies racing, one changes the
    # row and the other reads AlreadyThere. Only the first writes the event.
    paid_at = datetime.now(timezone.utc)
    moved = order_flow.advance(
        conn, orders, {"number": notice.order}, "PAID", values={"paid_at": paid_at}
    )
    if isinstance(moved, AlreadyThere):
        return False
    if not isinstance(moved, Applied):
        raise BadNotice(f"order {notice.order} can't be paid: {moved}")
    event: dict[str, Any] = {
        "order": notice.order,
        "sku": row["sku"],
        "quantity": row["quantity"],
        "customer": row["customer"],
        "phone": row["phone"],
    }
    outbox.add(conn, "order.paid", event, key=f"order:{notice.order}", event_type="order.paid")
    conn.execute(
        ledger.insert().values(
            event="order_paid", order_number=notice.order, detail=f"trade {notice.trade_no}"
        )
    )
    return True
