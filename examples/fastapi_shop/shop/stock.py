"""The stock service: ``python -m shop.stock``. Takes an order's stock once per order, in the
transaction that also writes the message's dedup record (a transactional consumer)."""

from __future__ import annotations

import json

from sqlalchemy.engine import Connection

from mideng.messaging import IdempotentConsumer, Message
from mideng.state import Applied, decrement
from shop import settings
from shop.consuming import serve
from shop.tables import ledger, stock
from shop.wiring import engine, guard


class OutOfStock(Exception):
    """Rolled back with the record; the message comes back with a backoff, then is dead."""


def take_stock(message: Message, conn: Connection) -> None:
    event = json.loads(message.body)
    # UPDATE stock SET quantity = quantity - :n WHERE sku = :sku AND quantity >= :n
    taken = decrement(conn, stock, {"sku": event["sku"]}, "quantity", event["quantity"])
    if not isinstance(taken, Applied):
        raise OutOfStock(f"{event['sku']}: {taken}")
    conn.execute(
        ledger.insert().values(
            event="stock_taken",
            order_number=event["order"],
            detail=f"{event['quantity']} x {event['sku']}",
        )
    )


def order_key(message: Message) -> str:
    """The business key: the order, whichever copy of its event this is."""
    return f"order:{json.loads(message.body)['order']}"


consumer = IdempotentConsumer(guard, "stock", take_stock, key=order_key, engine=engine)

if __name__ == "__main__":
    serve(consumer, settings.STOCK_QUEUE)
