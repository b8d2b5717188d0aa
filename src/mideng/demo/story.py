"""The payment story played through every layer, on mideng and on the same shop without it.

1. HTTP: the platform's callback times out and is retried: three callbacks at once, one late,
   to a real HTTP server on a loopback port (WSGI, behind mideng's middleware).
2. Outbox: the callback moves order 1001 UNPAID -> PAID with the state machine and writes
   its event to the outbox in the same transaction; the relay publishes what committed.
3. Broker and consumers: the event goes to two lanes. The stock consumer takes one unit in
   its record's transaction. The notifier, an OperationConsumer, runs the notification (an
   operation: SMS, coupon, points) once per event; its first delivery's worker, a process of
   its own, is SIGKILLed between the SMS and the coupon, the message goes back, and a
   redelivery takes the operation over once the dead worker's lease lapsed.
4. Job: the nightly settlement is started on two instances at once.

Without mideng the same story runs on tables of its own: a callback that reads "already
paid?" before it writes, an event published after the commit, a consumer and a notifier that
run whatever arrives, a job each instance runs. The ledgers of the two are what the demo
shows; every count in them is read back from the tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine

from mideng import Guard, open_store
from mideng.demo.lanes import Lane, broker_of, lane, prepare, remove
from mideng.demo.shop import (
    AMOUNT_CENTS,
    ORDER_ID,
    POINTS,
    TRADE_NO,
    Guarded,
    Ledger,
    Notification,
    Overlap,
    Plain,
    Tables,
)
from mideng.demo.worker import (
    WorkerFailed,
    WorkerKilled,
    killed_between_sms_and_coupon,
    message_spec,
)
from mideng.errors import ConfigurationError
from mideng.http.wsgi import IdempotencyMiddleware
from mideng.jobs import JobContext, Jobs, Outcome, run_slot
from mideng.messaging import Ack, IdempotentConsumer, Message, OperationConsumer, Retry, Verdict
from mideng.messaging.brokers import adapter
from mideng.messaging.publish import open_publisher, outgoing
from mideng.outbox import Outbox, Relay
from mideng.outbox.engines import sync_engine
from mideng.stores.base import Store
from mideng.stores.registry import require

#: Callbacks the platform sends at once when the first times out; one more comes later.
CALLBACKS = 3
#: How long the consumers may take to settle everything before the demo gives up.
SETTLE_TIMEOUT = 45.0
SQL_SCHEMES = {"sqlite", "postgresql", "postgres", "mysql", "mariadb"}


class StoryFailed(Exception):
    """The story could not be played to its end: a server failed it, or a worker did."""


@dataclass
class Layer:
    """One layer's line: what arrived, what ran with mideng and what it deduplicated, and
    what ran without it."""

    name: str
    arrived: str
    ran: str
    deduplicated: str
    unguarded: str


@dataclass
class Story:
    layers: list[Layer] = field(default_factory=list)
    guarded: Ledger | None = None
    plain: Ledger | None = None


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""


def _store_options(url: str, suffix: str) -> dict[str, Any]:
    if _scheme(url) in SQL_SCHEMES:
        return {"table": f"demo_{suffix}_records"}
    if _scheme(url) in ("redis", "rediss"):
        return {"prefix": f"demo:{suffix}"}
    return {}


class _Threaded(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """The demo prints what arrived itself."""


class Server:
    """A WSGI app on a loopback port, served from a thread of its own."""

    def __init__(self, app: Any) -> None:
        self.httpd = make_server("127.0.0.1", 0, app, _Threaded, _Quiet)
        self.port = self.httpd.server_port
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@dataclass(frozen=True)
class Answer:
    status: int
    replayed: bool


def _callback(port: int) -> Answer:
    body = json.dumps({"trade_no": TRADE_NO, "order_id": ORDER_ID, "amount": AMOUNT_CENTS})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(
            "POST",
            "/pay-notify",
            body,
            {"Content-Type": "application/json", "Idempotency-Key": TRADE_NO},
        )
        response = conn.getresponse()
        response.read()
        return Answer(response.status, response.getheader("Idempotent-Replayed") == "true")
    finally:
        conn.close()


def retried_callbacks(port: int) -> list[Answer]:
    """The platform's retries: CALLBACKS at once, then one late."""
    answers: list[Answer] = []
    failures: list[BaseException] = []
    gate = threading.Barrier(CALLBACKS)
    lock = threading.Lock()

    def send() -> None:
        gate.wait()
        try:
            answer = _callback(port)
        except Exception as exc:  # a thread's error would only be printed
            with lock:
                failures.append(exc)
            return
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=send) for _ in range(CALLBACKS)]
    for each in threads:
        each.start()
    for each in threads:
        each.join()
    if failures:
        raise failures[0]
    answers.append(_callback(port))
    return answers


def _wsgi(handle: Callable[[bytes], tuple[int, dict[str, Any]]], runs: list[int]) -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        runs.append(1)
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        status, answer = handle(body)
        reason = "OK" if status == 200 else "Conflict"
        start_response(f"{status} {reason}", [("Content-Type", "application/json")])
        return [json.dumps(answer).encode()]

    return app


class CountingConsumer:
    """The stock consumer, counted: what arrived, what ran, what it deduplicated."""

    def __init__(self, stock: IdempotentConsumer) -> None:
        self.stock = stock
        # What an adapter reads of a consumer.
        self.policy, self.engine = stock.policy, stock.engine
        self.delivered = self.ran = self.deduplicated = 0

    async def handle(self, message: Message) -> Verdict:
        self.delivered += 1
        verdict = await self.stock.handle(message)
        if isinstance(verdict, Ack):
            if verdict.ran:
                self.ran += 1
            else:
                self.deduplicated += 1
        return verdict

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        return [await self.handle(m) for m in messages]


class FirstWorker:
    """The notifier's first delivery goes to a worker process of its own, SIGKILLed between
    the SMS and the coupon (``mideng.demo.worker``); ``spec`` is what it runs on."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.killed: int | None = None
        self.failed: WorkerFailed | None = None

    def died(self, delivery: dict[str, Any]) -> bool:
        """Whether ``delivery`` (its ``event`` or ``message``) was the first, handled by the
        worker that was killed; a worker that did not die as it should raises WorkerFailed
        (the story cannot go on: _consume_until ends it)."""
        if self.killed is not None:
            return False
        try:
            self.killed = killed_between_sms_and_coupon({**self.spec, **delivery})
        except WorkerFailed as exc:
            self.failed = exc
            raise
        return True


class NotifyingConsumer:
    """The notifier's consumer: mideng's OperationConsumer, one operation record per event.

    Its first delivery is handled by a worker process that dies (kill -9) between the SMS and
    the coupon; the message goes back to the broker, as when a consumer dies holding it. The
    redeliveries are handled here by the same OperationConsumer: held while the dead worker's
    lease runs, then taken over, resumed after the SMS step."""

    def __init__(self, consumer: OperationConsumer, worker: FirstWorker) -> None:
        self.consumer, self.worker = consumer, worker
        # What an adapter reads of a consumer.
        self.policy, self.engine = consumer.policy, consumer.engine
        self.delivered = self.held = self.notified = 0

    async def handle(self, message: Message) -> Verdict:
        self.delivered += 1
        try:
            died = await asyncio.to_thread(self.worker.died, {"message": message_spec(message)})
        except WorkerFailed as exc:
            return Retry(0.2, str(exc))
        if died:
            return Retry(0.2, f"worker {self.worker.killed} was SIGKILLed mid-notification")
        verdict = await self.consumer.handle(message)
        if isinstance(verdict, Ack):
            self.notified += 1
        elif isinstance(verdict, Retry):
            self.held += 1  # the dead worker's claim, until its lease lapses
        return verdict

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        return [await self.handle(m) for m in messages]


class Notifier:
    """The notification without mideng as its consumer calls it: the first call runs in the
    worker that is killed, every later call here."""

    def __init__(self, worker: FirstWorker, here: Callable[[dict[str, Any]], Any]) -> None:
        self.worker, self.here = worker, here

    def __call__(self, event: dict[str, Any]) -> Any:
        if self.worker.died({"event": event}):
            raise WorkerKilled(f"worker {self.worker.killed} was SIGKILLed mid-notification")
        return self.here(event)


class PlainConsumer:
    """A consumer without dedup: it runs every message it gets; a failure sends it back."""

    def __init__(self, plain: Plain, notify: Notifier, policy: Any) -> None:
        self.plain, self.notify, self.policy, self.engine = plain, notify, policy, None
        self.delivered = self.finished = 0

    async def handle(self, message: Message) -> Verdict:
        self.delivered += 1
        event = json.loads(message.body)
        try:
            await asyncio.to_thread(self.plain.take_stock, event)
            await asyncio.to_thread(self.notify, event)
        except Exception as exc:
            return Retry(0.2, f"failed: {exc}")
        self.finished += 1
        return Ack(ran=True)

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        return [await self.handle(m) for m in messages]


async def _consume_until(
    consumers: list[tuple[Any, Lane]],
    broker: str,
    url: str,
    done: Callable[[], bool],
    workers: Sequence[FirstWorker],
    stores: Sequence[Store],
) -> None:
    """Consume until ``done()``; ``stores`` are closed as the consumers stop, on their loop."""
    consume = adapter(broker)
    stop = asyncio.Event()
    tasks = [
        asyncio.ensure_future(consume(consumer, url, stop=stop, **each.options))
        for consumer, each in consumers
    ]
    deadline = time.monotonic() + SETTLE_TIMEOUT
    try:
        while not done():
            for task in tasks:
                if task.done():
                    await task  # it died: its error
                    raise StoryFailed("a consumer stopped before the story ended")
            for worker in workers:
                if worker.failed is not None:
                    raise StoryFailed(str(worker.failed))
            if time.monotonic() > deadline:
                raise StoryFailed(
                    f"the consumers did not settle the story in {SETTLE_TIMEOUT:.0f} s"
                )
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        try:
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        finally:
            for store in stores:
                await store.aclose()


def _publisher(url: str, destination: str) -> Callable[[bytes], None]:
    """The plain callback's publish after its commit: a connection of its own each time."""

    def publish(body: bytes) -> None:
        async def send() -> None:
            publisher = open_publisher(url)
            await publisher.start()
            try:
                await publisher.publish(outgoing(destination, body, key=None))
            finally:
                await publisher.close()

        asyncio.run(send())

    return publish


def _drop_tables(engine: Engine, prefix: str) -> None:
    names = [n for n in inspect(engine).get_table_names() if n.startswith(prefix)]
    quote = engine.dialect.identifier_preparer.quote
    cascade = " CASCADE" if engine.dialect.name == "postgresql" else ""
    with engine.begin() as conn:
        if engine.dialect.name in ("mysql", "mariadb"):
            conn.execute(text("SET FOREIGN_KEY_CHECKS = 0"))
        for name in names:
            conn.execute(text(f"DROP TABLE IF EXISTS {quote(name)}{cascade}"))
        if engine.dialect.name == "postgresql":
            # The outbox's NOTIFY trigger function outlives its table.
            conn.execute(text(f"DROP FUNCTION IF EXISTS {quote(prefix + 'outbox_notify')}()"))


def run(
    workdir: Path,
    store_url: str | None,
    broker_url: str,
    say: Callable[[str], None] = lambda line: None,
) -> Story:
    """Play the story; ``say`` is told each step as it happens."""
    suffix = uuid.uuid4().hex[:8]
    broker = broker_of(broker_url)  # a URL naming no broker ends the demo before anything runs
    shop_url = f"sqlite:///{workdir / 'shop.db'}"
    if store_url is None:
        store_url = shop_url
    elif _scheme(store_url) in SQL_SCHEMES:
        shop_url = store_url  # the shop's tables beside the records: one transaction for both
    if _scheme(store_url) == "memory":
        raise ConfigurationError(
            "the demo's notifier worker is a process of its own, and a memory:// store is not "
            "shared with it: use a store URL another process can open (the default: SQLite)"
        )
    store = open_store(store_url, **_store_options(store_url, suffix))
    try:
        store.now()  # a store nothing answers on ends the demo here, before anything runs
    except BaseException:
        store.close()
        raise
    # The stock consumer's records sit in the shop's database, in its transaction: the store's
    # when that is the shop's database, else a table of the shop's own.
    records = (
        store if shop_url == store_url else open_store(shop_url, **_store_options(shop_url, suffix))
    )
    engine = sync_engine(shop_url)
    prefix = f"demo_{suffix}_"
    lanes = {name: lane(broker, suffix, name) for name in ("stock", "notify", "plain")}
    try:

        def second() -> Store:
            return open_store(store_url, **_store_options(store_url, suffix))

        spec = {"store": store_url, "store_options": _store_options(store_url, suffix)}
        return _play(
            store, spec, second, records, engine, shop_url, broker, broker_url, prefix, lanes, say
        )
    finally:
        asyncio.run(remove(broker, broker_url, list(lanes.values())))
        # What the run left is named its own; a server that failed the run (what is reported)
        # fails its clearing too, and that must not hide why the run failed.
        with contextlib.suppress(Exception):
            if _scheme(shop_url) != "sqlite":
                _drop_tables(engine, prefix)
        engine.dispose()
        if records is not store:
            records.close()
        store.close()
        with contextlib.suppress(Exception):
            if _scheme(store_url) in ("redis", "rediss"):
                _drop_keys(store_url, f"demo:{suffix}")


def _drop_keys(url: str, prefix: str) -> None:
    """The run's records on a Redis store (they would expire; the layout key would not)."""
    client = require("redis", "redis").Redis.from_url(url)
    try:
        names = list(client.scan_iter(match=f"{prefix}:*", count=500))
        if names:
            client.delete(*names)
    finally:
        client.close()


def _play(
    store: Store,
    store_spec: dict[str, Any],
    second: Callable[[], Store],
    records: Store,
    engine: Engine,
    shop_url: str,
    broker: str,
    broker_url: str,
    prefix: str,
    lanes: dict[str, Lane],
    say: Callable[[str], None],
) -> Story:
    story = Story()
    guarded_tables, plain_tables = Tables(prefix), Tables(f"{prefix}plain_")
    guarded_tables.create(engine)
    plain_tables.create(engine)
    outbox = Outbox(engine, table=f"{prefix}outbox")
    outbox.create_schema()
    asyncio.run(prepare(broker, broker_url, list(lanes.values())))
    guard = Guard(store, lease=5)
    # Behind the middleware one callback gets into the handler; the pause holds it there while
    # the others arrive. Without it all three get in, and wait for each other at once.
    shop = Guarded(engine, guarded_tables, Overlap(CALLBACKS), outbox)
    plain = Plain(
        engine,
        plain_tables,
        Overlap(CALLBACKS, pause=10.0),
        _publisher(broker_url, lanes["plain"].destination),
    )

    # -- 1. HTTP -------------------------------------------------------------------------------
    guarded_runs: list[int] = []
    plain_runs: list[int] = []
    # The paid event goes to each of its consumers' lanes: one outbox row for each.
    paid_lanes = [lanes["stock"].destination, lanes["notify"].destination]
    guarded_app = IdempotencyMiddleware(
        _wsgi(lambda body: shop.pay_notify(body, paid_lanes), guarded_runs),
        guard=guard,
        in_progress="wait",
        wait_timeout=20,
    )
    servers = [Server(guarded_app), Server(_wsgi(plain.pay_notify, plain_runs))]
    try:
        say(
            f"HTTP: {CALLBACKS} callbacks for {TRADE_NO} at once, then one late retry, to "
            f"127.0.0.1:{servers[0].port} (mideng) and 127.0.0.1:{servers[1].port} (plain)"
        )
        answers = retried_callbacks(servers[0].port)
        refused = [a.status for a in answers if a.status != 200]
        if refused:
            raise StoryFailed(f"the callbacks were answered {refused} by the order service")
        retried_callbacks(servers[1].port)
    finally:
        for server in servers:
            server.close()
    replayed = sum(a.replayed for a in answers)
    say("  answers (mideng): " + ", ".join(str(a.status) for a in answers))
    story.layers.append(
        Layer(
            "HTTP callback",
            _count(len(answers), "callback"),
            _count(len(guarded_runs), "handler run"),
            f"{replayed} (replayed)",
            _count(len(plain_runs), "handler run"),
        )
    )

    # -- 2. state machine + outbox -> relay ----------------------------------------------------
    say("Relay: publishing the outbox's committed rows")
    batch = asyncio.run(_relay_once(shop_url, broker_url, f"{prefix}outbox"))
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT COUNT(*) FROM {prefix}outbox")).scalar_one()
    story.layers.append(
        Layer(
            "PAID + outbox row",
            _count(len(guarded_runs), "handler run"),
            f"{_count(rows, 'outbox row')}, relay sent {batch}",
            f"{len(answers) - len(guarded_runs)} never reached it",
            _count(plain.published, "event") + " sent",
        )
    )

    # -- 3. broker -> stock consumer, notification operation ----------------------------------
    # The notifier is a service of its own: its own store connection, whose asyncio client
    # (an OperationConsumer reads its records asynchronously) is closed on the consumers' loop.
    notifier_store = second()
    notification = Notification(Guard(notifier_store), shop.gateways)
    worker = FirstWorker({"mode": "guarded", "shop": shop_url, "prefix": prefix, **store_spec})
    plain_worker = FirstWorker({"mode": "plain", "shop": shop_url, "prefix": f"{prefix}plain_"})
    stock = IdempotentConsumer(
        Guard(records, lease=5),
        "stock",
        lambda message, conn: _take_stock(shop, message, conn),
        key=lambda message: str(json.loads(message.body)["order_id"]),
        engine=engine,
        retry_delay=0.2,
    )
    stock_consumer = CountingConsumer(stock)
    notify_consumer = NotifyingConsumer(notification.consumer, worker)
    plain_consumer = PlainConsumer(plain, Notifier(plain_worker, plain.notify), stock.policy)
    say(f"Broker: {broker_url.split('://', maxsplit=1)[0]}:// consumers take the stock and notify")
    asyncio.run(
        _consume_until(
            [
                (stock_consumer, lanes["stock"]),
                (notify_consumer, lanes["notify"]),
                (plain_consumer, lanes["plain"]),
            ],
            broker,
            broker_url,
            lambda: (
                stock_consumer.ran >= 1
                and notify_consumer.notified >= 1
                and plain_consumer.finished >= plain.published
            ),
            [worker, plain_worker],
            [notifier_store],
        )
    )
    story.layers.append(
        Layer(
            "stock consumer",
            _count(stock_consumer.delivered, "delivery"),
            f"stock taken {stock_consumer.ran}x",
            _count(stock_consumer.deduplicated, "redelivery"),
            f"{_count(plain_consumer.delivered, 'delivery')}, "
            f"stock taken {plain_consumer.delivered}x",
        )
    )
    guarded, unguarded = guarded_tables.ledger(engine), plain_tables.ledger(engine)
    story.layers.append(
        Layer(
            "notify operation",
            f"{_count(_runs(guard, notification.consumer.scope), 'run')}, 1 killed -9",
            f"SMS {guarded.sms}, coupon {guarded.coupons}, points {guarded.points // POINTS}",
            f"resumed after SMS ({notify_consumer.held} held)",
            f"SMS {unguarded.sms}, coupon {unguarded.coupons}, points {unguarded.points // POINTS}",
        )
    )

    # -- 4. the nightly job on two instances ---------------------------------------------------
    outcomes = _nightly([store, second()], shop, plain)
    story.layers.append(
        Layer(
            "settlement job",
            _count(len(outcomes), "instance"),
            _count(outcomes.count(Outcome.RAN), "run"),
            ", ".join(f"1 instance ({o.value})" for o in outcomes if o is not Outcome.RAN),
            _count(len(outcomes), "run"),
        )
    )
    story.guarded = guarded_tables.ledger(engine)
    story.plain = plain_tables.ledger(engine)
    return story


def _runs(guard: Guard, scope: str) -> int:
    """The operation's runs for the order: its record's attempts, each a claim that ran its
    body (the killed worker's, the take-over)."""
    record = guard.get(scope, str(ORDER_ID))
    return record.attempts if record is not None else 0


def _count(n: int, what: str) -> str:
    plural = what[:-1] + "ies" if what.endswith("y") else what + "s"
    return f"{n} {what if n == 1 else plural}"


async def _relay_once(db: str, broker_url: str, table: str) -> int:
    async with Relay(db, broker_url, table=table) as relay:
        return (await relay.run_once()).sent


def _take_stock(shop: Guarded, message: Message, conn: Connection) -> None:
    shop.take_stock(json.loads(message.body), conn)


def _nightly(stores: list[Store], shop: Guarded, plain: Plain) -> list[Outcome]:
    """The settlement's slot claimed by two instances at once (each its own store connection
    and Guard, on a thread); the plain job runs on both."""
    jobs = Jobs()

    @jobs.job("nightly_settlement", cron="0 2 * * *", tz="UTC")
    def nightly_settlement(context: JobContext) -> None:
        shop.nightly(context.key)

    job = jobs["nightly_settlement"]
    slot = job.schedule.slot_at(stores[0].now())
    gate = threading.Barrier(2)
    outcomes: list[Outcome] = []
    lock = threading.Lock()

    def instance(store: Store) -> None:
        guard = Guard(store)
        gate.wait()
        ran = run_slot(guard, job, slot)
        with lock:
            outcomes.append(ran.outcome)
        plain.nightly(job.name)

    threads = [threading.Thread(target=instance, args=(store,)) for store in stores]
    for each in threads:
        each.start()
    for each in threads:
        each.join()
    stores[1].close()
    return sorted(outcomes, key=lambda o: o is not Outcome.RAN)


def expected() -> Ledger:
    """The ledger of one payment: what mideng's run must end with."""
    return Ledger("PAID", coupons=1, points=POINTS, stock=9, sms=1, settlements=1)
