"""The shop of the demo's story: its tables, and its code written twice, once the way it was
before anyone thought of retries (``Plain``) and once on mideng (``Guarded``).

Order 1001 (user 7, one unit of SKU-1, 99.00) is paid. The payment platform's callback marks
it PAID and announces it; the stock service takes one unit; a notifier sends an SMS, issues a
coupon and adds 99 points; a nightly job settles the day. Every table is named with a prefix
of the run's own, so runs against a shared database never meet.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, func, insert, select, update
from sqlalchemy.engine import Connection, Engine

from mideng.state import Applied, StateMachine, decrement

ORDER_ID = 1001
USER_ID = 7
SKU = "SKU-1"
STOCK = 10
AMOUNT_CENTS = 9900
POINTS = AMOUNT_CENTS // 100
TRADE_NO = "T20261129-0001"

ORDER_FLOW = StateMachine({"UNPAID": ["PAID"], "PAID": ["SHIPPED"]}, initial="UNPAID")


@dataclass(frozen=True)
class Ledger:
    """What the customer and the warehouse ended up with."""

    status: str
    coupons: int
    points: int
    stock: int
    sms: int
    settlements: int


class Tables:
    """The shop's tables under ``prefix``."""

    def __init__(self, prefix: str) -> None:
        self.metadata = MetaData()
        self.orders = Table(
            f"{prefix}orders",
            self.metadata,
            Column("id", Integer, primary_key=True, autoincrement=False),
            Column("user_id", Integer, nullable=False),
            Column("status", String(12), nullable=False),
        )
        self.stock = Table(
            f"{prefix}stock",
            self.metadata,
            Column("sku", String(20), primary_key=True),
            Column("qty", Integer, nullable=False),
        )
        self.points = Table(
            f"{prefix}points",
            self.metadata,
            Column("user_id", Integer, primary_key=True, autoincrement=False),
            Column("balance", Integer, nullable=False),
        )
        # Rows the outside world keeps: a coupon issued, an SMS sent, a settlement booked.
        self.coupons = self._log(f"{prefix}coupons")
        self.sms = self._log(f"{prefix}sms")
        self.settlements = self._log(f"{prefix}settlements")

    def _log(self, name: str) -> Table:
        return Table(
            name,
            self.metadata,
            Column("id", Integer, primary_key=True, autoincrement=True),
            Column("ref", String(64), nullable=False),
        )

    def create(self, engine: Engine) -> None:
        self.metadata.create_all(engine)
        with engine.begin() as conn:
            conn.execute(insert(self.orders).values(id=ORDER_ID, user_id=USER_ID, status="UNPAID"))
            conn.execute(insert(self.stock).values(sku=SKU, qty=STOCK))
            conn.execute(insert(self.points).values(user_id=USER_ID, balance=0))

    def drop(self, engine: Engine) -> None:
        self.metadata.drop_all(engine)

    def ledger(self, engine: Engine) -> Ledger:
        with engine.connect() as conn:

            def count(table: Table) -> int:
                return int(conn.execute(select(func.count()).select_from(table)).scalar_one())

            return Ledger(
                status=conn.execute(
                    select(self.orders.c.status).where(self.orders.c.id == ORDER_ID)
                ).scalar_one(),
                coupons=count(self.coupons),
                points=conn.execute(
                    select(self.points.c.balance).where(self.points.c.user_id == USER_ID)
                ).scalar_one(),
                stock=conn.execute(
                    select(self.stock.c.qty).where(self.stock.c.sku == SKU)
                ).scalar_one(),
                sms=count(self.sms),
                settlements=count(self.settlements),
            )


class Overlap:
    """The slow call inside the callback (the platform's signature checked with its server)
    whose slowness made the platform time out and retry. It answers once ``overlap`` callers
    are inside it, or after ``pause`` seconds: the overlap of the incident, made repeatable."""

    def __init__(self, overlap: int, pause: float = 0.5) -> None:
        self._overlap, self._pause = overlap, pause
        self._inside = 0
        self._cond = threading.Condition()

    def __call__(self) -> None:
        with self._cond:
            self._inside += 1
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._inside >= self._overlap, timeout=self._pause)


class Gateways:
    """The SMS gateway, the coupon service and the points service: each call is one more
    SMS, coupon or credit. The coupon service drops the first call it gets (``lost``: the
    notifier's worker is lost between the SMS and the coupon), as the incident's did."""

    def __init__(self, engine: Engine, tables: Tables) -> None:
        self.engine, self.tables = engine, tables
        self.sms_calls = self.coupon_calls = self.points_calls = 0
        self._lock = threading.Lock()

    def send_sms(self, ref: str) -> int:
        """The SMS's number: the n-th this gateway sent."""
        with self._lock:
            self.sms_calls += 1
            sent = self.sms_calls
        with self.engine.begin() as conn:
            conn.execute(insert(self.tables.sms).values(ref=ref))
        return sent

    def issue_coupon(self, ref: str) -> int:
        """The coupon's number: the n-th call this service got."""
        with self._lock:
            self.coupon_calls += 1
            call = self.coupon_calls
        if call == 1:
            raise WorkerLost("the notifier's worker was lost between the SMS and the coupon")
        with self.engine.begin() as conn:
            conn.execute(insert(self.tables.coupons).values(ref=ref))
        return call

    def add_points(self, user_id: int, points: int) -> int:
        with self._lock:
            self.points_calls += 1
        with self.engine.begin() as conn:
            conn.execute(
                update(self.tables.points)
                .where(self.tables.points.c.user_id == user_id)
                .values(balance=self.tables.points.c.balance + points)
            )
        return points


class WorkerLost(Exception):
    """The notifier's worker died mid-operation: what it had done is done, the rest is not."""


def paid_event(order_id: int) -> dict[str, Any]:
    return {"order_id": order_id, "user_id": USER_ID, "sku": SKU, "qty": 1}


def settle(engine: Engine, tables: Tables, day: str) -> None:
    """The nightly settlement: book the day's paid orders (one row a run)."""
    with engine.begin() as conn:
        conn.execute(insert(tables.settlements).values(ref=day))


# -- the code before mideng -------------------------------------------------------------------
class Plain:
    """The shop as written before retries were thought of: every layer trusts another to
    catch a duplicate."""

    def __init__(
        self, engine: Engine, tables: Tables, overlap: Overlap, publish: Callable[[bytes], None]
    ) -> None:
        self.engine, self.tables, self.overlap, self._publish = engine, tables, overlap, publish
        self.gateways = Gateways(engine, tables)
        self.published = 0

    def pay_notify(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """The callback: "already paid?" is read before the write, so concurrent callbacks
        all pass it; the event is published after the commit."""
        order_id = json.loads(body)["order_id"]
        orders = self.tables.orders
        with self.engine.begin() as conn:
            status = conn.execute(
                select(orders.c.status).where(orders.c.id == order_id)
            ).scalar_one()
        if status == "PAID":
            return 200, {"result": "success"}
        self.overlap()
        with self.engine.begin() as conn:
            conn.execute(update(orders).where(orders.c.id == order_id).values(status="PAID"))
        self._publish(json.dumps(paid_event(order_id)).encode())
        self.published += 1
        return 200, {"result": "success"}

    def take_stock(self, event: dict[str, Any]) -> None:
        stock = self.tables.stock
        with self.engine.begin() as conn:
            conn.execute(
                update(stock).where(stock.c.sku == event["sku"]).values(qty=stock.c.qty - 1)
            )

    def notify(self, event: dict[str, Any]) -> None:
        ref = f"order:{event['order_id']}"
        self.gateways.send_sms(ref)
        self.gateways.issue_coupon(ref)
        self.gateways.add_points(event["user_id"], POINTS)

    def nightly(self, day: str) -> None:
        settle(self.engine, self.tables, day)


# -- the same shop on mideng ------------------------------------------------------------------
class Guarded:
    """The shop on mideng: the callback's transition and its outbox row in one transaction,
    the stock taken in the consumer's record transaction, the notification an operation of
    steps. Its guard, consumer and job are wired by ``mideng.demo.story``."""

    def __init__(self, engine: Engine, tables: Tables, overlap: Overlap, outbox: Any) -> None:
        self.engine, self.tables, self.overlap, self.outbox = engine, tables, overlap, outbox
        self.gateways = Gateways(engine, tables)

    def pay_notify(self, body: bytes, destination: str) -> tuple[int, dict[str, Any]]:
        order_id = json.loads(body)["order_id"]
        self.overlap()
        with self.engine.begin() as conn:
            moved = ORDER_FLOW.advance(conn, self.tables.orders, {"id": order_id}, "PAID")
            if isinstance(moved, Applied):
                # Written with the transition: published by the relay once both committed.
                self.outbox.add(conn, destination, paid_event(order_id), key=f"order:{order_id}")
            elif not moved.ok:
                return 409, {"result": "fail", "reason": str(moved)}
        return 200, {"result": "success"}

    def take_stock(self, event: dict[str, Any], conn: Connection) -> None:
        taken = decrement(conn, self.tables.stock, {"sku": event["sku"]}, "qty", event["qty"])
        if not taken.ok:
            raise LookupError(f"cannot take stock of {event['sku']}: {taken}")

    def nightly(self, day: str) -> None:
        settle(self.engine, self.tables, day)
