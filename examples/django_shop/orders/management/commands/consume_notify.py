"""``python manage.py consume_notify``: the notification service, running the ``notify``
operation once per paid order from its own stream until SIGTERM or Ctrl-C."""

from __future__ import annotations

from mideng.messaging import OperationConsumer
from orders.consuming import StreamCommand
from orders.notify import notify_consumer


class Command(StreamCommand):
    help = "Tell each paid order's customer (an SMS, then a coupon), once per order."
    stream, group = "NOTIFY_EVENTS", "NOTIFY_GROUP"

    def consumer(self) -> OperationConsumer:
        return notify_consumer()
