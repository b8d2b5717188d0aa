"""examples/django_shop run as its README runs it, each part a child process of its own
(``manage.py migrate``, ``runserver``, ``mideng_relay``, ``consume_stock``): Django's
settings are process-wide and the HTTP tests configure their own in this process.

Everything a retrying world does to the shop at once, then its ledger counted exactly: one
order for three sends of one Idempotency-Key (and one more for another customer's same key),
the order PAID once for seven payment callbacks (five at once), one outbox row, and the stock
taken once although the event is in the stream twice and the consumer is killed (SIGKILL)
holding both entries, then restarted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import sqlalchemy as sa

from tests.contrib.django.project import fresh_database
from tests.examples.running import WAIT, spare_port, until
from tests.services import REDIS_URL, need

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django_shop"
SKU, ON_SHELF, PRICE, BOUGHT = "SKU-1", 10, 250, 2


class Shop:
    """The example on a fresh database (``url``) and streams of its own; ``manage.py`` runs
    in it, and the test reads the database on ``engine``."""

    def __init__(self, folder: Path, url: str) -> None:
        run = uuid.uuid4().hex[:8]
        self.folder = folder
        self.engine = sa.create_engine(url, poolclass=sa.NullPool)
        self.stream, self.group = f"shop-test-{run}", f"stock-{run}"
        self.env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(EXAMPLE), *sys.path]),
            DJANGO_SETTINGS_MODULE="shop.settings",
            SHOP_DATABASE_URL=url,
            SHOP_REDIS_URL=REDIS_URL,
            SHOP_ORDER_EVENTS=self.stream,
            SHOP_STOCK_GROUP=self.group,
        )

    def manage(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, str(EXAMPLE / "manage.py"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    def start(self, name: str, *args: str) -> subprocess.Popen[str]:
        """``manage.py args`` left running, its output in ``name``.log."""
        with (self.folder / f"{name}.log").open("w") as log:  # the child holds its own copy
            return subprocess.Popen(
                [sys.executable, str(EXAMPLE / "manage.py"), *args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text()

    def count(self, query: str, **params: Any) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(sa.text(query), params).scalar_one()

    def ledger(self, event: str) -> int:
        return int(self.count("SELECT COUNT(*) FROM orders_ledger WHERE event = :e", e=event))

    @contextlib.contextmanager
    def stock_locked(self) -> Iterator[None]:
        """Writers of the stock wait while this is open: on SQLite every writer (the test holds
        the write lock, so a consumer's transaction waits to begin), on PostgreSQL those that
        reach the stock (a consumer's waits after its claim, in the middle of its
        transaction)."""
        with self.engine.connect() as conn:
            if self.engine.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                conn.exec_driver_sql("LOCK TABLE orders_stock IN EXCLUSIVE MODE")
            try:
                yield
            finally:
                conn.rollback()


@pytest.fixture(params=["sqlite", "postgresql"])
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Shop]:
    need("redis")
    with fresh_database(request.param, tmp_path) as url:
        shop = Shop(tmp_path, url)
        client = redis.Redis.from_url(REDIS_URL)
        try:
            yield shop
        finally:
            client.delete(shop.stream, f"{shop.stream}:dead")
            client.close()
            shop.engine.dispose()


@pytest.fixture
def server(shop: Shop) -> Iterator[str]:
    shop.manage("migrate", "--no-input")
    shop.manage("set_stock", SKU, str(ON_SHELF), str(PRICE))
    address = f"127.0.0.1:{spare_port()}"
    running = shop.start("server", "runserver", "--noreload", address)
    base = f"http://{address}"

    def answers() -> bool:
        assert running.poll() is None, shop.log("server")
        try:
            return httpx.get(f"{base}/orders/none", timeout=1).status_code == 401
        except httpx.TransportError:
            return False

    try:
        until("the server", answers)
        yield base
    finally:
        running.terminate()
        running.wait(timeout=10)


def _create_order(base: str, key: str, customer: str = "alice") -> httpx.Response:
    return httpx.post(
        f"{base}/orders",
        json={"sku": SKU, "quantity": BOUGHT},
        headers={"Idempotency-Key": key, "X-Customer": customer},
        timeout=WAIT,
    )


def _notify(base: str, form: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{base}/pay/notify", data=form, timeout=WAIT)


def _pending(client: Any, shop: Shop) -> int:
    return int(client.xpending(shop.stream, shop.group)["pending"])


def _all_read(client: Any, shop: Shop) -> bool:
    """Every entry of the stream delivered to the group and acked."""
    last = client.xrevrange(shop.stream, count=1)[0][0]
    group = next(g for g in client.xinfo_groups(shop.stream) if g["name"].decode() == shop.group)
    return bool(group["last-delivered-id"] == last and group["pending"] == 0)


@pytest.mark.slow
def test_retries_duplicates_and_a_killed_consumer_change_the_shop_once(
    shop: Shop, server: str
) -> None:
    # Three sends of one create request (a client that timed out): one order.
    key = f"create-{uuid.uuid4().hex}"
    with ThreadPoolExecutor(3) as pool:
        creates = list(pool.map(lambda _: _create_order(server, key), range(3)))
    assert {r.status_code for r in creates} <= {201, 409}, [r.text for r in creates]
    late = _create_order(server, key)
    assert late.status_code == 201, late.text
    assert late.headers["Idempotent-Replayed"] == "true"
    order = late.json()
    assert {r.json()["number"] for r in creates if r.status_code == 201} <= {order["number"]}
    assert (order["status"], order["amount"]) == ("UNPAID", PRICE * BOUGHT)
    # Keys are each customer's own: bob's request with the same key is his first.
    bobs = _create_order(server, key, customer="bob")
    assert (bobs.status_code, "Idempotent-Replayed" in bobs.headers) == (201, False)
    assert bobs.json()["number"] != order["number"]

    # Five copies of one payment notice at once, then two late retries: PAID once.
    notice = {
        "trade_no": f"T{uuid.uuid4().hex[:12]}",
        "out_trade_no": order["number"],
        "total_amount": str(order["amount"]),
    }
    with ThreadPoolExecutor(5) as pool:
        callbacks = list(pool.map(lambda _: _notify(server, notice), range(5)))
    callbacks += [_notify(server, notice) for _ in range(2)]
    assert [(r.status_code, r.text) for r in callbacks] == [(200, "success")] * 7
    bad = _notify(server, {**notice, "total_amount": "1"})
    assert bad.status_code == 422, bad.text  # the same trade number with other fields

    # The relay publishes the one outbox row; a second pass has nothing left.
    assert "published 1, failed 0, dead 0" in shop.manage("mideng_relay", "--once").stdout
    assert "published 0, failed 0, dead 0" in shop.manage("mideng_relay", "--once").stdout
    client: Any = redis.Redis.from_url(REDIS_URL)
    try:
        # The same event in the stream twice, as a relay that died before writing back its
        # publish would leave it.
        [(_, fields)] = client.xrange(shop.stream)
        client.xadd(shop.stream, fields)

        # The consumer reads both entries and is killed before it can commit: the stock is
        # locked, so its transaction waits.
        client.xgroup_create(shop.stream, shop.group, id="0")
        with shop.stock_locked():
            first = shop.start("consumer-1", "consume_stock", "--name", "w1")
            until("both entries delivered", lambda: _pending(client, shop) == 2)
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        assert shop.ledger("stock_taken") == 0

        # Restarted under its name, it settles what it held: the stock is taken once.
        second = shop.start("consumer-2", "consume_stock", "--name", "w1")
        try:
            until("every entry acked", lambda: _all_read(client, shop))
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=20)
        assert second.returncode == 0, shop.log("consumer-2")
        assert client.xlen(shop.stream) == 2
        assert client.xlen(f"{shop.stream}:dead") == 0
    finally:
        client.close()

    # The ledger, exactly.
    assert shop.count("SELECT COUNT(*) FROM orders_order") == 2  # alice's and bob's
    paid = "SELECT status || ' ' || trade_no FROM orders_order WHERE number = :n"
    assert shop.count(paid, n=order["number"]) == f"PAID {notice['trade_no']}"
    assert shop.count(paid, n=bobs.json()["number"]) == "UNPAID "
    assert shop.count("SELECT COUNT(*) FROM mideng_outbox") == 1
    assert shop.count("SELECT COUNT(*) FROM mideng_outbox WHERE state = 1") == 1
    on_shelf = shop.count("SELECT quantity FROM orders_stock WHERE sku = :sku", sku=SKU)
    assert on_shelf == ON_SHELF - BOUGHT
    counts = {event: shop.ledger(event) for event in ("order_created", "order_paid", "stock_taken")}
    assert counts == {"order_created": 2, "order_paid": 1, "stock_taken": 1}
    stats = shop.manage("mideng_stats")  # exit 0: nothing stuck, nothing unknown
    assert "stock" in stats.stdout
    assert "pay_notify" in stats.stdout
