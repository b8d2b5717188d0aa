"""The notification service's side of ``order.paid``: the ``notify`` operation, once per paid
order. A local step (the order marked notified and a ledger row, in one
``transaction.atomic()`` block with the step's record), then two remote ones after that
commit: the SMS, then the coupon, each sent with its own ``step_key()``.

``OperationConsumer`` runs it per entry of the notification stream under the order's key: a
copy of a finished order is acked unrun, and a consumer killed between the SMS and the coupon
is taken over once its lease ran out; the redelivery resumes at the coupon, the SMS is not
sent again.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection, transaction

from mideng.contrib.django import guard
from mideng.messaging import Message, OperationConsumer
from mideng.operations import step_key
from orders import providers
from orders.models import Ledger, Order


@guard().step("mark_notified", conn="conn")
def mark_notified(conn: Any, order: str) -> None:
    Order.objects.filter(number=order).update(notified=True)
    Ledger.objects.create(event=Ledger.Event.NOTIFIED, order_number=order)


@guard().step("send_sms")
def send_sms(customer: str, text: str) -> None:
    providers.send_sms(customer, text, idempotency_key=step_key())


@guard().step("issue_coupon")
def issue_coupon(customer: str) -> str:
    return providers.issue_coupon(customer, idempotency_key=step_key())


@guard().operation(
    "notify", key="order:{order}", steps=("mark_notified", "send_sms", "issue_coupon")
)
def notify(order: str, customer: str, sku: str, quantity: int) -> str:
    with transaction.atomic():  # the local step's writes and its record commit together
        mark_notified(connection, order)
    send_sms(customer, f"Order {order} is paid: {quantity} x {sku} are on their way")
    return issue_coupon(customer)


def order_key(message: Message) -> str:
    """The operation's key, whichever copy of the event this is."""
    return f"order:{json.loads(message.body)['order']}"


def notify_consumer() -> OperationConsumer:
    # The entry's body is the operation's arguments; its order is the operation's key.
    return OperationConsumer(guard(), notify, key=order_key)
