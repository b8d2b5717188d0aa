"""An order's life (UNPAID -> PAID -> SHIPPED), the stock it takes, and a ledger of what
happened, one row per effect: each row is written in the transaction of the change it
describes, so counting rows counts changes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models

from mideng.state import StateMachine


class Status(models.TextChoices):
    UNPAID = "UNPAID"
    PAID = "PAID"
    SHIPPED = "SHIPPED"


# The only ways an order's status may move; StateMachine.advance refuses any other in the
# UPDATE itself, so two callers can never both move one order.
ORDER_FLOW = StateMachine(
    {Status.UNPAID: [Status.PAID], Status.PAID: [Status.SHIPPED]}, initial=Status.UNPAID
)


class Order(models.Model):
    number: models.CharField[str, str] = models.CharField(max_length=64, unique=True)
    customer: models.ForeignKey[Any, Any] = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT
    )
    sku: models.CharField[str, str] = models.CharField(max_length=64)
    quantity: models.PositiveIntegerField[int, int] = models.PositiveIntegerField()
    amount: models.PositiveIntegerField[int, int] = models.PositiveIntegerField(
        help_text="in cents"
    )
    status: models.CharField[str, str] = models.CharField(
        max_length=16, choices=Status.choices, default=Status.UNPAID
    )
    trade_no: models.CharField[str, str] = models.CharField(
        max_length=64, blank=True, help_text="the payment's, once paid"
    )
    created_at: models.DateTimeField[datetime, datetime] = models.DateTimeField(auto_now_add=True)
    paid_at: models.DateTimeField[datetime | None, datetime | None] = models.DateTimeField(
        null=True, blank=True
    )
    notified: models.BooleanField[bool, bool] = models.BooleanField(
        default=False, help_text="the customer was told it is paid"
    )

    def __str__(self) -> str:
        return f"{self.number} ({self.status})"


class Stock(models.Model):
    sku: models.CharField[str, str] = models.CharField(max_length=64, unique=True)
    quantity: models.PositiveIntegerField[int, int] = models.PositiveIntegerField()
    price: models.PositiveIntegerField[int, int] = models.PositiveIntegerField(help_text="in cents")

    def __str__(self) -> str:
        return f"{self.sku}: {self.quantity}"


class Ledger(models.Model):
    class Event(models.TextChoices):
        ORDER_CREATED = "order_created"
        ORDER_PAID = "order_paid"
        STOCK_TAKEN = "stock_taken"
        NOTIFIED = "notified"
        DAILY_SALES = "daily_sales"

    event: models.CharField[str, str] = models.CharField(max_length=32, choices=Event.choices)
    order_number: models.CharField[str, str] = models.CharField(max_length=64, blank=True)
    detail: models.CharField[str, str] = models.CharField(max_length=200, blank=True)
    at: models.DateTimeField[datetime, datetime] = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = (models.Index(fields=["order_number", "event"]),)

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.event} {self.order_number} {self.detail}"


class DailySales(models.Model):
    """The nightly job's report: one row per day, written under its slot's fence (a run that
    was taken over while paused can no longer write it)."""

    day: models.CharField[str, str] = models.CharField(max_length=10, unique=True)
    orders: models.PositiveIntegerField[int, int] = models.PositiveIntegerField(default=0)
    amount: models.PositiveIntegerField[int, int] = models.PositiveIntegerField(
        default=0, help_text="in cents"
    )
    fence: models.PositiveIntegerField[int, int] = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.day}: {self.orders} orders, {self.amount} cents"
