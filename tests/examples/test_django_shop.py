"""examples/django_shop run as its README runs it, each part a child process of its own
(``manage.py migrate``, ``runserver``, ``mideng_relay``, ``consume_stock``,
``consume_notify``, two ``run_jobs``): Django's settings are process-wide and the HTTP tests
configure their own in this process.

Everything a retrying world does to the shop at once, then its ledger counted exactly: one
order for three sends of one Idempotency-Key (and one more for another customer's same key);
the order PAID once for seven payment callbacks (five at once), with one outbox row per lane;
the stock event in the stream twice (on PostgreSQL the relay is SIGKILLed after it published
and before it marked the row sent; SQLite has no row lock to park it there, so the copy is
added as that relay would leave it) and the stock consumer SIGKILLed holding both entries,
then restarted: the stock taken once; the notifier SIGKILLed between the SMS and the coupon,
then restarted: one SMS, one coupon, the operation resumed at the coupon; two schedulers
started at once: the nightly report once; ``/metrics`` answering with mideng's counters.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
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
from tests.examples.running import WAIT, handles_sigterm, spare_port, until
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
        self.notify_stream, self.notify_group = f"shop-notify-{run}", f"notify-{run}"
        self.providers = folder / "providers"
        self.env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(EXAMPLE), *sys.path]),
            DJANGO_SETTINGS_MODULE="shop.settings",
            SHOP_DATABASE_URL=url,
            SHOP_REDIS_URL=REDIS_URL,
            SHOP_ORDER_EVENTS=self.stream,
            SHOP_STOCK_GROUP=self.group,
            SHOP_NOTIFY_EVENTS=self.notify_stream,
            SHOP_NOTIFY_GROUP=self.notify_group,
            SHOP_PROVIDERS_DIR=str(self.providers),
            SHOP_LEASE="2",  # a killed notifier's operation is taken over after 2 s
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

    def stop(self, *processes: subprocess.Popen[str]) -> list[int]:
        """SIGTERM each once it handles SIGTERM; their exit codes."""
        for process in processes:
            until("a handler of SIGTERM", functools.partial(handles_sigterm, process))
            process.send_signal(signal.SIGTERM)
        return [process.wait(timeout=20) for process in processes]

    def provided(self, name: str) -> list[dict[str, Any]]:
        """The records a provider's stand-in kept (orders.providers)."""
        path = self.providers / name
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines]

    @contextlib.contextmanager
    def provider_locked(self, name: str) -> Iterator[None]:
        """The stand-in's file locked as it locks it to write: its next record waits."""
        self.providers.mkdir(exist_ok=True)
        with (self.providers / name).open("a") as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            yield

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
            client.delete(
                shop.stream, f"{shop.stream}:dead", shop.notify_stream, f"{shop.notify_stream}:dead"
            )
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


def _all_read(client: Any, stream: str, name: str) -> bool:
    """Every entry of ``stream`` delivered to the group ``name`` and acked."""
    last = client.xrevrange(stream, count=1)[0][0]
    group = next(g for g in client.xinfo_groups(stream) if g["name"].decode() == name)
    return bool(group["last-delivered-id"] == last and group["pending"] == 0)


@pytest.mark.slow
def test_duplicates_and_kills_along_the_chain_change_the_shop_once(shop: Shop, server: str) -> None:
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

    client: Any = redis.Redis.from_url(REDIS_URL)
    try:
        _relay_twice(shop, client)
        assert "published 0, failed 0, dead 0" in shop.manage("mideng_relay", "--once").stdout
        assert client.xlen(shop.stream) == 2  # the stock lane: its event twice
        assert client.xlen(shop.notify_stream) in (1, 2)  # as far as the killed relay got

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
        until("every entry acked", lambda: _all_read(client, shop.stream, shop.group))
        assert shop.stop(second) == [0], shop.log("consumer-2")
        assert client.xlen(f"{shop.stream}:dead") == 0

        # The notifier parked between the SMS and the coupon (the coupon service's records
        # are locked), SIGKILLed there, then started again under its name.
        client.xgroup_create(shop.notify_stream, shop.notify_group, id="0")
        with shop.provider_locked("coupons.jsonl"):
            notifier = shop.start("notifier-1", "consume_notify", "--name", "n1")
            until("the SMS sent", lambda: len(shop.provided("sms.jsonl")) == 1)
            until("the coupon waited for", functools.partial(_waits_on_a_lock, notifier))
            notifier.send_signal(signal.SIGKILL)
            notifier.wait(timeout=10)
        assert shop.provided("coupons.jsonl") == []
        notifier = shop.start("notifier-2", "consume_notify", "--name", "n1")
        until("the coupon issued", lambda: len(shop.provided("coupons.jsonl")) == 1)
        until(
            "every notification acked",
            lambda: _all_read(client, shop.notify_stream, shop.notify_group),
        )
        assert shop.stop(notifier) == [0], shop.log("notifier-2")
        assert client.xlen(f"{shop.notify_stream}:dead") == 0
    finally:
        client.close()

    # The nightly job: two schedulers start at once; the latest slot's report is written once.
    schedulers = [shop.start(f"jobs-{n}", "run_jobs") for n in (1, 2)]
    until("the nightly report", lambda: shop.ledger("daily_sales") == 1)
    assert shop.stop(*schedulers) == [0, 0], shop.log("jobs-1") + shop.log("jobs-2")
    scraped = httpx.get(f"{server}/metrics", timeout=WAIT)

    # The ledger, exactly.
    assert shop.count("SELECT COUNT(*) FROM orders_order") == 2  # alice's and bob's
    paid = "SELECT status || ' ' || trade_no FROM orders_order WHERE number = :n"
    assert shop.count(paid, n=order["number"]) == f"PAID {notice['trade_no']}"
    assert shop.count(paid, n=bobs.json()["number"]) == "UNPAID "
    notified = "SELECT COUNT(*) FROM orders_order WHERE notified AND number = :n"
    assert shop.count(notified, n=order["number"]) == 1
    assert shop.count("SELECT COUNT(*) FROM mideng_outbox") == 2  # one row per lane
    assert shop.count("SELECT COUNT(*) FROM mideng_outbox WHERE state = 1") == 2
    on_shelf = shop.count("SELECT quantity FROM orders_stock WHERE sku = :sku", sku=SKU)
    assert on_shelf == ON_SHELF - BOUGHT
    events = ("order_created", "order_paid", "stock_taken", "notified", "daily_sales")
    counts = {event: shop.ledger(event) for event in events}
    assert counts == {
        "order_created": 2,
        "order_paid": 1,
        "stock_taken": 1,
        "notified": 1,
        "daily_sales": 1,
    }
    assert shop.count("SELECT COUNT(*) FROM orders_dailysales") == 1
    [sms], [coupon] = shop.provided("sms.jsonl"), shop.provided("coupons.jsonl")
    assert (sms["to"], coupon["customer"]) == ("alice", "alice")
    assert sms["idempotency_key"] != coupon["idempotency_key"]
    # The operation: taken over once after the kill (attempt 2), resumed at the coupon.
    attempts = "SELECT attempts FROM mideng_records WHERE scope = 'notify' AND key = :k"
    assert shop.count(attempts, k=f"order:{order['number']}") == 2
    slots = "SELECT COUNT(*) FROM mideng_records WHERE scope = 'job:daily_sales'"
    assert shop.count(slots) == 1
    stats = shop.manage("mideng_stats")  # exit 0: nothing stuck, nothing unknown
    assert "stock" in stats.stdout
    assert "pay_notify" in stats.stdout
    assert scraped.status_code == 200
    assert "mideng_http_responses_total" in scraped.text


def _relay_twice(shop: Shop, client: Any) -> None:
    """The stock lane's event published twice, as a relay killed between its publish and its
    write-back leaves it, then every row published and marked sent."""
    if shop.engine.dialect.name != "postgresql":
        # SQLite's relay cannot be parked there: publish, then add the copy that kill leaves.
        assert "published 2, failed 0, dead 0" in shop.manage("mideng_relay", "--once").stdout
        [(_, fields)] = client.xrange(shop.stream)
        client.xadd(shop.stream, fields)
        return
    relay = ("mideng_relay", "--lease", "1", "--poll", "0.2", "--progress", "0")
    with shop.engine.connect() as conn:
        # The rows locked once committed: the relay publishes, then waits to mark them sent.
        conn.exec_driver_sql("SELECT * FROM mideng_outbox FOR UPDATE")
        killed = shop.start("relay-1", *relay)
        until("the stock event published", lambda: client.xlen(shop.stream) == 1)
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=10)
        conn.rollback()
    again = shop.start("relay-2", *relay)  # publishes again once the dead relay's lease lapsed
    sent = "SELECT COUNT(*) FROM mideng_outbox WHERE state = 1"
    until("both rows marked sent", lambda: shop.count(sent) == 2)
    assert shop.stop(again) == [0], shop.log("relay-2")


def _waits_on_a_lock(process: subprocess.Popen[str]) -> bool:
    """``process`` is blocked on a file lock (a waiter's line in /proc/locks)."""
    lines = Path("/proc/locks").read_text().splitlines()
    return any("->" in line and f" {process.pid} " in line for line in lines)
