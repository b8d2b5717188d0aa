"""The payment platform's callback: the order becomes PAID once per trade, however often the
platform sends the notice (it retries until it reads ``success``, and may send copies at once).

In one ``transaction.atomic()`` block: the dedup record of the trade number, the order's move
UNPAID -> PAID, the ``order.paid`` event in the outbox twice (one row per lane: the stock
service's stream and the notification service's) and a ledger row. They commit together
or not at all, so there is no moment where the order is paid but the event is missing, or the
trade recorded but the order unpaid. A copy that arrives while the first is in its block waits
on the record's row, then answers what the first stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from mideng.contrib.django import guard
from mideng.outbox import Outbox
from mideng.state import Applied
from orders.models import ORDER_FLOW, Ledger, Order, Status

# The table's name only: each add() writes to the connection it is given.
outbox = Outbox(connection)


class BadNotice(ValueError):
    """The notice is not one we can act on; nothing was recorded, so a corrected retry runs."""


@dataclass(frozen=True)
class PaymentNotice:
    trade_no: str
    order_number: str
    amount: int

    @classmethod
    def from_form(cls, form: Mapping[str, str]) -> PaymentNotice:
        fields = ("trade_no", "out_trade_no", "total_amount")
        missing = [name for name in fields if not form.get(name)]
        if missing:
            raise BadNotice(f"missing field(s): {', '.join(missing)}")
        if not form["total_amount"].isdigit():
            raise BadNotice("total_amount must be a whole number of cents")
        return cls(form["trade_no"], form["out_trade_no"], int(form["total_amount"]))


def record_payment(notice: PaymentNotice) -> dict[str, Any]:
    """What the first delivery of ``notice`` decided; raises ``BadNotice`` (rolling back)."""
    with (
        transaction.atomic(),
        guard().transaction(
            connection, "pay_notify", notice.trade_no, payload=asdict(notice)
        ) as tx,
    ):
        if tx.replayed:
            result: dict[str, Any] = tx.result
            return result
        tx.set_result(_mark_paid(notice))
    return dict(tx.value)


def _mark_paid(notice: PaymentNotice) -> dict[str, Any]:
    order = Order.objects.filter(number=notice.order_number).first()
    if order is None:
        raise BadNotice(f"no order {notice.order_number}")
    if order.amount != notice.amount:
        raise BadNotice(f"order {order.number} costs {order.amount}, not {notice.amount}")
    moved = ORDER_FLOW.advance(
        connection,
        Order,
        order.pk,
        Status.PAID,
        values={"trade_no": notice.trade_no, "paid_at": datetime.now(timezone.utc)},
    )
    if not isinstance(moved, Applied):
        # Paid already under another trade number (or shipped): this trade changes nothing,
        # and the platform is still told "success" so that it stops sending it.
        return {"order": order.number, "paid": False, "found": type(moved).__name__}
    event = {"order": order.number, "sku": order.sku, "quantity": order.quantity}
    # The notification's arguments: the notify operation's, as its consumer passes them.
    notice_of_payment = {**event, "customer": order.customer.get_username()}
    for stream, body in (
        (settings.ORDER_EVENTS, event),
        (settings.NOTIFY_EVENTS, notice_of_payment),
    ):
        outbox.add(connection, stream, body, key=f"order:{order.number}", event_type="order.paid")
    Ledger.objects.create(
        event=Ledger.Event.ORDER_PAID, order_number=order.number, detail=f"trade {notice.trade_no}"
    )
    return {"order": order.number, "paid": True}
