"""examples/fastapi_shop run as its README runs it, on PostgreSQL and RabbitMQ, each part a
child process of its own (``python -m shop setup``, uvicorn, ``mideng relay``, the stock
consumer, the notification consumer, two ``mideng jobs run``), then its ledger counted exactly.

What a retrying world does to it: an order sent twice with one Idempotency-Key (one order);
the payment callback eight times, five at once and one under another key (the order PAID
once, one outbox row); the relay SIGKILLed after it published and before it marked the row
sent (the event published twice, the stock taken once); the stock consumer SIGKILLed in its
transaction and the notification consumer SIGKILLed between the SMS and the coupon, both
restarted (stock taken once, one SMS, one coupon: the operation resumed at the coupon); two
schedulers starting at once (the nightly report once).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import pytest
import sqlalchemy as sa

from tests.brokers import AMQP_URL
from tests.contrib.django.project import fresh_database
from tests.examples.running import handles_sigterm, spare_port, until
from tests.services import need

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fastapi_shop"
SKU, ON_SHELF, PRICE, BOUGHT = "SKU-1", 10, 250, 2


class Shop:
    """The example on a fresh database and an exchange and queues of its own."""

    def __init__(self, folder: Path, url: str) -> None:
        run = uuid.uuid4().hex[:8]
        self.folder, self.url = folder, url
        self.engine = sa.create_engine(url, poolclass=sa.NullPool)
        self.exchange = f"shop-test-{run}"
        self.queues = (f"shop-stock-{run}", f"shop-notify-{run}")
        self.env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(EXAMPLE), str(ROOT / "src")]),
            SHOP_DATABASE_URL=url,
            SHOP_AMQP_URL=AMQP_URL,
            SHOP_EXCHANGE=self.exchange,
            SHOP_STOCK_QUEUE=self.queues[0],
            SHOP_NOTIFY_QUEUE=self.queues[1],
            SHOP_LEASE="2",  # a killed consumer's operation is taken over after 2 s
        )
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, *args],
            cwd=EXAMPLE,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with (self.folder / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, *args], cwd=EXAMPLE, env=self.env, stdout=log, stderr=log
            )
        self.processes[name] = process
        return process

    def kill(self, name: str) -> None:
        process = self.processes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    def stop_all(self) -> dict[str, int | None]:
        """SIGTERM each once it handles SIGTERM (a process still starting would just die)."""
        for name, process in self.processes.items():
            with contextlib.suppress(AssertionError):  # a stop that fails shows in its code
                until(f"{name} to handle SIGTERM", functools.partial(handles_sigterm, process))
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for name, process in self.processes.items():
            try:
                codes[name] = process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                codes[name] = None
        self.processes.clear()
        return codes

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def scalar(self, query: str, **params: Any) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(sa.text(query), params).scalar_one()

    def ledger(self, event: str, order: str | None = None) -> int:
        if order is None:
            return int(self.scalar("SELECT COUNT(*) FROM ledger WHERE event = :e", e=event))
        query = "SELECT COUNT(*) FROM ledger WHERE event = :e AND order_number = :o"
        return int(self.scalar(query, e=event, o=order))

    def waiting_on_locks(self) -> int:
        """Sessions of this database blocked on a lock (a consumer parked on the test's)."""
        query = (
            "SELECT COUNT(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return int(self.scalar(query))

    @contextlib.contextmanager
    def locked(self, statement: str) -> Iterator[None]:
        """A lock the test holds until the block ends (then rolls back)."""
        with self.engine.connect() as conn:
            conn.exec_driver_sql(statement)
            try:
                yield
            finally:
                conn.rollback()

    def drop_broker(self) -> None:
        async def drop() -> None:
            async with await aio_pika.connect(AMQP_URL) as connection:
                channel = await connection.channel()
                for queue in self.queues:
                    await channel.queue_delete(queue)
                await channel.exchange_delete(self.exchange)

        asyncio.run(drop())


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[Shop]:
    need("rabbitmq")
    with fresh_database("postgresql", tmp_path) as url:
        made = Shop(tmp_path, url)
        try:
            yield made
        finally:
            made.stop_all()
            made.drop_broker()
            made.engine.dispose()


def relay(shop: Shop) -> None:
    shop.start(
        "relay", "-m", "mideng", "relay", "--db", shop.url, "--broker", AMQP_URL,
        "--exchange", shop.exchange, "--lease", "1", "--poll", "0.2", "--progress", "0",
    )  # fmt: skip


@pytest.mark.slow
def test_duplicates_and_kills_along_the_chain_change_the_shop_once(shop: Shop) -> None:
    shop.run("-m", "shop", "setup")
    shop.run("-m", "shop", "set-stock", SKU, str(ON_SHELF), str(PRICE))
    port = spare_port()
    web = shop.start("web", "-m", "uvicorn", "shop.app:app", "--port", str(port))
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert web.poll() is None, shop.log("web")
        try:
            return httpx.get(f"{base}/orders/none", timeout=1).status_code == 404
        except httpx.TransportError:
            return False

    until("the web process", answers)
    shop.start("stock", "-m", "shop.stock")
    shop.start("notify", "-m", "shop.notify")

    def order(key: str, customer: str = "alice") -> httpx.Response:
        body = {"sku": SKU, "quantity": BOUGHT, "phone": "+86 138 0000 0000"}
        headers = {"Idempotency-Key": key, "X-Customer": customer}
        return httpx.post(f"{base}/orders", json=body, headers=headers, timeout=10)

    def pay(number: str, trade_no: str, key: str | None = None) -> httpx.Response:
        body = {"trade_no": trade_no, "order": number, "amount": BOUGHT * PRICE}
        headers = {"Idempotency-Key": key or trade_no, "X-Customer": "platform"}
        return httpx.post(f"{base}/pay/notify", json=body, headers=headers, timeout=10)

    # An order sent twice with one key (a client that timed out): one order, replayed.
    first, again = order("k-a"), order("k-a")
    assert first.status_code == again.status_code == 201, first.text
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    a, b, c = first.json()["number"], order("k-b").json()["number"], order("k-c").json()["number"]

    # The callback for A: five at once, two after, one under another key. The relay is not
    # running yet: A's outbox row is locked by the test once it committed, so the relay that
    # starts publishes it and then waits to mark it sent; it is killed there.
    with ThreadPoolExecutor(5) as pool:
        burst = list(pool.map(lambda _: pay(a, "T-A"), range(5)))
    assert any(r.text == "success" for r in burst), [r.text for r in burst]
    assert all(r.text == "success" or r.status_code == 409 for r in burst)
    assert [pay(a, "T-A").text, pay(a, "T-A").text] == ["success", "success"]
    assert pay(a, "T-A", key="T-A-resent").text == "success"  # past the key: AlreadyThere
    with shop.locked("SELECT * FROM mideng_outbox FOR UPDATE"):
        relay(shop)
        until("A's stock taken from the first publish", lambda: shop.ledger("stock_taken") == 1)
        shop.kill("relay")  # published, not marked sent
    relay(shop)  # publishes A's event again once the dead relay's lease lapsed
    until("the event marked sent", lambda: shop.scalar(
        "SELECT COUNT(*) FROM mideng_outbox WHERE state = 1") == 1)  # fmt: skip

    # B's event: the stock consumer parked inside its transaction, the notification consumer
    # parked between the SMS and the coupon; both SIGKILLed there, then started again.
    until("A notified", lambda: shop.scalar("SELECT COUNT(*) FROM coupons_issued") == 1)
    with (
        shop.locked("LOCK TABLE stock IN EXCLUSIVE MODE"),
        shop.locked("LOCK TABLE coupons_issued IN EXCLUSIVE MODE"),
    ):
        assert pay(b, "T-B").text == "success"
        until("B's SMS sent", lambda: shop.scalar("SELECT COUNT(*) FROM sms_sent") == 2)
        until("both consumers parked", lambda: shop.waiting_on_locks() == 2)
        shop.kill("stock")
        shop.kill("notify")
    shop.start("stock", "-m", "shop.stock")
    shop.start("notify", "-m", "shop.notify")
    until("B's stock", lambda: shop.ledger("stock_taken") == 2)
    until("B's coupon", lambda: shop.scalar("SELECT COUNT(*) FROM coupons_issued") == 2)

    # The nightly job: two schedulers start at once; the latest slot's report is written once.
    for n in (1, 2):
        shop.start(
            f"jobs-{n}", "-m", "mideng", "jobs", "run", "--store", shop.url, "shop.jobs:jobs"
        )
    until("the nightly report", lambda: shop.ledger("daily_sales") == 1)
    scraped = httpx.get(f"{base}/metrics", timeout=5).text
    codes = shop.stop_all()
    # uvicorn ends its shutdown by re-raising the SIGTERM it caught: -15 is its clean stop.
    assert codes.pop("web") in (0, -signal.SIGTERM), shop.log("web")[-1500:]
    assert set(codes.values()) == {0}, (codes, {n: shop.log(n)[-1500:] for n in codes})

    # The ledger, exactly.
    assert shop.ledger("order_created") == 3
    for number in (a, b):
        assert shop.ledger("order_paid", number) == 1
        assert shop.ledger("stock_taken", number) == 1
        assert shop.ledger("notified", number) == 1
    assert shop.ledger("order_paid", c) == shop.ledger("stock_taken", c) == 0
    assert shop.ledger("daily_sales") == 1
    assert shop.scalar("SELECT COUNT(*) FROM daily_sales") == 1
    assert shop.scalar("SELECT quantity FROM stock WHERE sku = :s", s=SKU) == ON_SHELF - 2 * BOUGHT
    assert shop.scalar("SELECT COUNT(*) FROM mideng_outbox") == 2
    assert shop.scalar("SELECT COUNT(*) FROM sms_sent") == 2
    assert shop.scalar("SELECT COUNT(*) FROM coupons_issued") == 2
    assert shop.scalar("SELECT COUNT(DISTINCT idempotency_key) FROM sms_sent") == 2
    statuses = shop.scalar("SELECT string_agg(status, ',' ORDER BY number) FROM orders")
    assert sorted(statuses.split(",")) == ["PAID", "PAID", "UNPAID"]
    # A's event came twice (the killed relay's publish and the next relay's): the copy was
    # acked unrun by both consumers.
    stock_log = shop.log("stock")
    assert f"scope=stock key=order:{a} outcome=replay" in stock_log, stock_log[-3000:]
    # B's operation: taken over once after the kill, resumed at the coupon; one record.
    attempts = "SELECT attempts FROM mideng_records WHERE scope = 'notify' AND key = :k"
    assert shop.scalar(attempts, k=f"order:{b}") == 2
    assert shop.scalar(attempts, k=f"order:{a}") == 1
    assert "mideng_http_responses_total" in scraped
