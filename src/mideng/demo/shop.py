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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, func, insert, select, update
from sqlalchemy.engine import Connection, Engine

from mideng import Guard
from mideng.messaging import Message, OperationConsumer
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
    SMS, coupon or credit, kept in the shop's tables. ``before_coupon`` is called as a call
    reaches the coupon service (the worker killed there, in ``mideng.demo.worker``)."""

    def __init__(
        self, engine: Engine, tables: Tables, before_coupon: Callable[[], None] | None = None
    ) -> None:
        self.engine, self.tables, self.before_coupon = engine, tables, before_coupon

    def send_sms(self, ref: str) -> str:
        with self.engine.begin() as conn:
            conn.execute(insert(self.tables.sms).values(ref=ref))
        return f"sms:{ref}"

    def issue_coupon(self, ref: str) -> str:
        if self.before_coupon is not None:
            self.before_coupon()
        with self.engine.begin() as conn:
            conn.execute(insert(self.tables.coupons).values(ref=ref))
        return f"coupon:{ref}"

    def add_points(self, user_id: int, points: int) -> int:
        with self.engine.begin() as conn:
            conn.execute(
                update(self.tables.points)
                .where(self.tables.points.c.user_id == user_id)
                .values(balance=self.tables.points.c.balance + points)
            )
        return points


def notify_plainly(gateways: Gateways, event: dict[str, Any]) -> None:
    """The notification before mideng: SMS, coupon, points, whatever ran before."""
    ref = f"order:{event['order_id']}"
    gateways.send_sms(ref)
    gateways.issue_coupon(ref)
    gateways.add_points(event["user_id"], POINTS)


def order_key(message: Message) -> str:
    """The notification's key: the order the event is for."""
    return str(json.loads(message.body)["order_id"])


class Notification:
    """The notification on mideng: one operation, each effect a step, run by an
    OperationConsumer (``consumer``) once per event, so a delivery after a run that died
    resumes after the last step that finished. Its lease is short: a dead worker's run is
    taken over within ``LEASE`` seconds."""

    LEASE = 2.0
    #: Runs of one event's notification that failed (a kill is no failure) before its message
    #: is dead-lettered.
    MAX_ATTEMPTS = 5

    def __init__(self, guard: Guard, gateways: Gateways) -> None:
        @guard.step("send_sms")
        def send_sms(ref: str) -> str:
            return gateways.send_sms(ref)

        @guard.step("issue_coupon")
        def issue_coupon(ref: str) -> str:
            return gateways.issue_coupon(ref)

        @guard.step("add_points")
        def add_points(user_id: int, points: int) -> int:
            return gateways.add_points(user_id, points)

        @guard.operation(
            "notify_paid",
            key="{order_id}",
            steps=("send_sms", "issue_coupon", "add_points"),
            lease=self.LEASE,
        )
        def notify_paid(order_id: int, user_id: int) -> str:
            ref = f"order:{order_id}"
            send_sms(ref)
            issue_coupon(ref)
            add_points(user_id, POINTS)
            return "notified"

        # Its record counts the event's runs: a consumer's operation keeps its failures.
        guard.configure_scope("notify_paid", on_error="retry", max_attempts=self.MAX_ATTEMPTS)
        self.consumer = OperationConsumer(
            guard,
            notify_paid,
            arguments=lambda message: _notified(json.loads(message.body)),
            key=order_key,
            retry_delay=0.2,
            in_flight_delay=0.5,
        )


def _notified(event: dict[str, Any]) -> dict[str, Any]:
    return {"order_id": event["order_id"], "user_id": event["user_id"]}


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
        notify_plainly(self.gateways, event)

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

    def pay_notify(self, body: bytes, destinations: Sequence[str]) -> tuple[int, dict[str, Any]]:
        order_id = json.loads(body)["order_id"]
        self.overlap()
        with self.engine.begin() as conn:
            moved = ORDER_FLOW.advance(conn, self.tables.orders, {"id": order_id}, "PAID")
            if isinstance(moved, Applied):
                # Written with the transition: published by the relay once both committed.
                for destination in destinations:
                    event = paid_event(order_id)
                    self.outbox.add(conn, destination, event, key=f"order:{order_id}")
            elif not moved.ok:
                return 409, {"result": "fail", "reason": str(moved)}
        return 200, {"result": "success"}

    def take_stock(self, event: dict[str, Any], conn: Connection) -> None:
        taken = decrement(conn, self.tables.stock, {"sku": event["sku"]}, "qty", event["qty"])
        if not taken.ok:
            raise LookupError(f"cannot take stock of {event['sku']}: {taken}")

    def nightly(self, day: str) -> None:
        settle(self.engine, self.tables, day)
