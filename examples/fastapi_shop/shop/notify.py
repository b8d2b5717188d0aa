"""The notification service: ``python -m shop.notify``. Each ``order.paid`` event runs the
``notify`` operation once: mark the order notified (a local step, in its own transaction),
send the SMS, issue the coupon (two remote steps, after that commit). A consumer killed
between the SMS and the coupon is taken over once its lease ran out, and the redelivery
resumes at the coupon: the SMS is not sent again (mideng.messaging.OperationConsumer)."""

from __future__ import annotations

import json

from sqlalchemy import update
from sqlalchemy.engine import Connection

from mideng.messaging import Message, OperationConsumer
from mideng.operations import step_key
from shop import providers, settings
from shop.consuming import serve
from shop.tables import ledger, orders
from shop.wiring import engine, guard


@guard.step("mark_notified", conn="conn")
def mark_notified(conn: Connection, order: str) -> None:
    conn.execute(update(orders).where(orders.c.number == order).values(notified=True))
    conn.execute(ledger.insert().values(event="notified", order_number=order))


@guard.step("send_sms")
def send_sms(phone: str, text: str) -> None:
    providers.send_sms(phone, text, idempotency_key=step_key())


@guard.step("issue_coupon")
def issue_coupon(customer: str) -> str:
    return providers.issue_coupon(customer, idempotency_key=step_key())


@guard.operation("notify", key="order:{order}", steps=("mark_notified", "send_sms", "issue_coupon"))
def notify(order: str, customer: str, phone: str, sku: str, quantity: int) -> str:
    with engine.begin() as conn:  # the local step's writes and its record commit together
        mark_notified(conn, order)
    send_sms(phone, f"Order {order} is paid: {quantity} x {sku} are on their way")
    return issue_coupon(customer)


def order_key(message: Message) -> str:
    return f"order:{json.loads(message.body)['order']}"


# The message's body is the operation's arguments; its order is the operation's key.
consumer = OperationConsumer(guard, notify, key=order_key)

if __name__ == "__main__":
    serve(consumer, settings.NOTIFY_QUEUE)
