"""The stock service's side of ``order.paid``: take the order's units off the shelf, once per
order, whatever the stream delivers (a relay that published an event again, a consumer killed
before its ack, a second consumer process).

``IdempotentConsumer(..., engine="default")`` runs ``take_stock`` inside one
``transaction.atomic()`` block on Django's connection together with the dedup record of the
order: the decrement, the ledger row and the record commit together, and the entry is acked
only after that commit. A copy of an order already taken is acked without running.
"""

from __future__ import annotations

import json
from typing import Any

from mideng.contrib.django import guard
from mideng.messaging import IdempotentConsumer, Message
from mideng.state import Applied, decrement
from orders.models import Ledger, Stock


class OutOfStock(Exception):
    """Rolls the attempt back; the entry comes back with a backoff, then is dead-lettered."""


def order_of(message: Message) -> str:
    """The business key: the order, not the stream entry (a re-published event is a new entry).
    A body that is not an order event raises, and the entry is dead-lettered unrun."""
    number = json.loads(message.body)["order"]
    if not isinstance(number, str):
        raise TypeError(f"an order number is a string, not {number!r}")
    return number


def take_stock(message: Message, connection: Any) -> None:
    event = json.loads(message.body)
    taken = decrement(connection, Stock, {"sku": event["sku"]}, "quantity", event["quantity"])
    if not isinstance(taken, Applied):
        raise OutOfStock(f"{event['sku']}: {type(taken).__name__} for order {event['order']}")
    Ledger.objects.create(
        event=Ledger.Event.STOCK_TAKEN,
        order_number=event["order"],
        detail=f"{event['quantity']} x {event['sku']}",
    )


def stock_consumer() -> IdempotentConsumer:
    return IdempotentConsumer(guard(), "stock", take_stock, key=order_of, engine="default")
