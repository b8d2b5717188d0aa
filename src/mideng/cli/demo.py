"""``mideng demo``: a retried payment callback, replayed with and without mideng.

A payment platform times out on the order service's callback and retries: three callbacks
arrive at once, and a fourth retry comes later. The handler marks the order paid, issues a
coupon and adds points. Its own "already paid?" check reads before it writes, so concurrent
callbacks all pass it. With mideng the same handler runs once and every callback gets its answer.
"""

from __future__ import annotations

import logging
import sqlite3
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from mideng import Guard, open_store
from mideng.observability import logs

CALLBACKS = 3


@dataclass(frozen=True)
class PayNotify:
    trade_no: str
    order_id: int
    amount_cents: int


@dataclass(frozen=True)
class Receipt:
    order_id: int
    coupon_id: int
    points_added: int


class SlowCouponService:
    """The downstream call whose slowness made the platform time out and retry.

    It answers once every concurrent callback is inside it (or after a short pause when only
    one is), which is exactly the overlap of the incident, made repeatable.
    """

    def __init__(self, overlap: int, pause: float = 0.3) -> None:
        self._overlap = overlap
        self._pause = pause
        self._inside = 0
        self._cond = threading.Condition()

    def issue(self) -> None:
        with self._cond:
            self._inside += 1
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._inside >= self._overlap, timeout=self._pause)


class Shop:
    """The business database: orders, coupons, points, and a log of handler runs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.coupon_service = SlowCouponService(CALLBACKS)
        with self._db() as db:
            db.executescript("""
                CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER, status TEXT);
                CREATE TABLE coupons (id INTEGER PRIMARY KEY AUTOINCREMENT, order_id INTEGER);
                CREATE TABLE points (user_id INTEGER PRIMARY KEY, balance INTEGER);
                CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, trade_no TEXT);
                INSERT INTO orders VALUES (1001, 7, 'UNPAID');
                INSERT INTO points VALUES (7, 0);
            """)

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def handle(self, notify: PayNotify) -> Receipt:
        """The order service's callback handler, as written before anyone thought of retries."""
        with self._db() as db:
            db.execute("INSERT INTO runs (trade_no) VALUES (?)", (notify.trade_no,))
            status = db.execute(
                "SELECT status FROM orders WHERE id = ?", (notify.order_id,)
            ).fetchone()[0]
            if status == "PAID":  # the check everyone trusts, and the race it loses
                return Receipt(notify.order_id, 0, 0)
            self.coupon_service.issue()  # slow: the platform times out and retries meanwhile
            coupon = (
                db.execute(
                    "INSERT INTO coupons (order_id) VALUES (?)", (notify.order_id,)
                ).lastrowid
                or 0
            )
            points = notify.amount_cents // 100
            db.execute("UPDATE points SET balance = balance + ? WHERE user_id = 7", (points,))
            db.execute("UPDATE orders SET status = 'PAID' WHERE id = ?", (notify.order_id,))
            return Receipt(notify.order_id, coupon, points)

    def tally(self) -> tuple[int, int, int]:
        with self._db() as db:
            coupons = db.execute("SELECT COUNT(*) FROM coupons").fetchone()[0]
            points = db.execute("SELECT balance FROM points WHERE user_id = 7").fetchone()[0]
            runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        return coupons, points, runs


def storm(handler: Callable[[PayNotify], Receipt]) -> list[Receipt]:
    """Three callbacks at once (the platform's retries after a timeout), then one late retry.
    A callback that raised (the store failed) raises here, once every one has ended."""
    notify = PayNotify(trade_no="T20261129-0001", order_id=1001, amount_cents=9900)
    answers: list[Receipt] = []
    failures: list[Exception] = []
    lock = threading.Lock()
    gate = threading.Barrier(CALLBACKS)

    def callback() -> None:
        gate.wait()
        try:
            receipt = handler(notify)
        except Exception as exc:  # a thread's error would only be printed, as a traceback
            with lock:
                failures.append(exc)
            return
        with lock:
            answers.append(receipt)

    threads = [threading.Thread(target=callback) for _ in range(CALLBACKS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    answers.append(handler(notify))
    return answers


def run_demo(workdir: Path, store_url: str | None) -> dict[str, tuple[int, int, int, int]]:
    # The store is opened first: a URL it can't use ends the demo before anything runs.
    store = open_store(f"sqlite:///{workdir / 'mideng.db'}" if store_url is None else store_url)
    try:
        plain = Shop(workdir / "shop-plain.db")
        answers_plain = storm(plain.handle)

        guarded_shop = Shop(workdir / "shop-guarded.db")
        guard = Guard(store, lease=30, in_progress="wait")
        handle = guard.idempotent(
            "pay_notify", key="{notify.trade_no}", payload=lambda notify: notify
        )(guarded_shop.handle)
        answers_guarded = storm(handle)
    finally:
        store.close()

    def distinct(answers: list[Receipt]) -> int:
        return len({a for a in answers if a.coupon_id})

    return {
        "without mideng": (*plain.tally(), distinct(answers_plain)),
        "with mideng": (*guarded_shop.tally(), distinct(answers_guarded)),
    }


@click.command()
@click.option(
    "--store",
    "store_url",
    default=None,
    help="Store URL for the guarded run (default: an embedded SQLite file).",
)
def demo(store_url: str | None) -> None:
    """Replay the payment-callback incident: 3 concurrent callbacks and a retry."""
    console = Console()
    # Each duplicate mideng turns away is logged at WARNING with its scope and key: show them,
    # on mideng's logger alone and for the demo alone (the process's logging is not ours).
    shown = RichHandler(console=console, show_path=False, show_time=False)
    shown.setFormatter(logging.Formatter("%(message)s"))
    with logs.shown_by(shown):
        console.print(
            "[bold]A payment callback times out; the platform retries.[/bold] "
            f"{CALLBACKS} callbacks for trade T20261129-0001 arrive at once, then one more retry."
        )
        with tempfile.TemporaryDirectory(prefix="mideng-demo-") as tmp:
            rows = run_demo(Path(tmp), store_url)
    table = Table(title="Retried payment callback: order paid once, or three times?")
    for column in ("", "coupons issued", "points added", "handler runs", "distinct receipts"):
        table.add_column(column, justify="right" if column else "left", no_wrap=not column)
    for label, (coupons, points, runs, receipts) in rows.items():
        table.add_row(label, str(coupons), str(points), str(runs), str(receipts))
    console.print(table)
    plain, guarded = rows["without mideng"], rows["with mideng"]
    console.print(
        f"Without mideng: {plain[0]} coupons for one payment. "
        f"With mideng: {guarded[0]}; every callback got the first run's receipt."
    )
