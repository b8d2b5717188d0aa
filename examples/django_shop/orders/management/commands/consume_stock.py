"""``python manage.py consume_stock``: the stock service, reading ``order.paid`` events from
Redis Streams until SIGTERM or Ctrl-C (the batch in hand is finished and acked first)."""

from __future__ import annotations

from mideng.messaging import IdempotentConsumer
from orders.consuming import StreamCommand
from orders.stock import stock_consumer


class Command(StreamCommand):
    help = "Take stock for paid orders, once per order, from the order events stream."
    stream, group = "ORDER_EVENTS", "STOCK_GROUP"

    def consumer(self) -> IdempotentConsumer:
        return stock_consumer()
