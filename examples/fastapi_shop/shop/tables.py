"""The business tables (SQLAlchemy Core), the order's state machine, and what stands in for
the two remote services (an SMS gateway, a coupon service): tables of their own, written in
transactions of their own, as a provider's database would be."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    func,
)

from mideng.state import StateMachine

metadata = MetaData()

orders = Table(
    "orders",
    metadata,
    Column("number", String(40), primary_key=True),
    Column("customer", String(80), nullable=False),
    Column("phone", String(40), nullable=False),
    Column("sku", String(40), nullable=False),
    Column("quantity", Integer, nullable=False),
    Column("amount", Integer, nullable=False),  # cents
    Column("status", String(20), nullable=False, server_default="UNPAID"),
    Column("notified", Boolean, nullable=False, server_default="false"),
    Column("paid_at", DateTime(timezone=True)),
)
stock = Table(
    "stock",
    metadata,
    Column("sku", String(40), primary_key=True),
    Column("quantity", Integer, nullable=False),
    Column("price", Integer, nullable=False),  # cents
)
#: One row per business event, written in the transaction that makes it happen.
ledger = Table(
    "ledger",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("event", String(40), nullable=False),
    Column("order_number", String(40)),
    Column("detail", String(200), nullable=False, server_default=""),
)
#: The nightly job's report: one row per day, written under the slot's fence.
daily_sales = Table(
    "daily_sales",
    metadata,
    Column("day", String(10), primary_key=True),
    Column("orders", Integer, nullable=False, server_default="0"),
    Column("amount", Integer, nullable=False, server_default="0"),
    Column("fence", Integer, nullable=False, server_default="0"),
)
#: The SMS gateway's and the coupon service's own records (stand-ins for the remote APIs).
sms_sent = Table(
    "sms_sent",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("phone", String(40), nullable=False),
    Column("text", String(200), nullable=False),
    Column("idempotency_key", String(80), nullable=False),
)
coupons_issued = Table(
    "coupons_issued",
    metadata,
    Column("code", String(40), primary_key=True),
    Column("customer", String(80), nullable=False),
    Column("idempotency_key", String(80), nullable=False),
)

#: UNPAID -> PAID -> SHIPPED; every transition one conditional UPDATE.
order_flow = StateMachine(
    {"UNPAID": ["PAID", "CANCELLED"], "PAID": ["SHIPPED"]},
    initial="UNPAID",
)
