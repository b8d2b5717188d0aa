"""IdempotentMiddleware on real brokers (RabbitMQ, NATS JetStream, Kafka on Tansu, Redis
Streams), through FastStream's own subscribers: a duplicate runs the handler once, a handler
that fails and then succeeds has its effect once, a dead letter is given up after its
attempts, and the transactional variant commits the handler's write with the record (a
rollback leaves nothing)."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest
from faststream import AckPolicy, BaseMiddleware, Context
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

from mideng import Guard, open_store
from mideng.core.record import Status
from mideng.messaging.faststream import Connection, IdempotentMiddleware
from mideng.messaging.faststream.settling import settling_for
from tests.brokers import AMQP_URL, BrokerNames
from tests.messaging.faststream.brokers import Case, Kafka, Nats, Rabbit, Redis
from tests.services import POSTGRES_URL, need

#: FastStream's message, as a handler's parameter.
Delivered = Annotated[Any, Context("message")]

#: What a delivery ended as, seen from outside the middleware: the handler's value went on
#: ("returned"), or the FastStream exception that settled it.
TERMINAL = frozenset({"returned", "AckMessage", "RejectMessage"})


@pytest.fixture(params=["rabbit", "nats", "kafka", "redis"])
def case(request: pytest.FixtureRequest, broker_names: BrokerNames) -> Case:
    name = request.param
    if name == "kafka":
        return Kafka(broker_names, request.getfixturevalue("kafka_broker"))
    return {"rabbit": Rabbit, "nats": Nats, "redis": Redis}[name](broker_names)


class Outcomes:
    """A middleware outside the idempotent one that records how each delivery ended."""

    def __init__(self, expected: int, of: frozenset[str] = TERMINAL) -> None:
        self.seen: list[str] = []
        self.expected, self.of = expected, of  # the outcomes the test waits for
        self.done = asyncio.Event()

    def __call__(self, msg: Any, /, *, context: Any) -> BaseMiddleware[Any, Any]:
        return _Recording(msg, context=context, outcomes=self)

    def add(self, outcome: str) -> None:
        self.seen.append(outcome)
        if sum(1 for seen in self.seen if seen in self.of) == self.expected:
            self.done.set()


class _Recording(BaseMiddleware[Any, Any]):
    def __init__(self, msg: Any, /, *, context: Any, outcomes: Outcomes) -> None:
        super().__init__(msg, context=context)
        self.outcomes = outcomes

    async def consume_scope(self, call_next: Any, msg: Any) -> Any:
        try:
            value = await call_next(msg)
        except BaseException as exc:
            self.outcomes.add(type(exc).__name__)
            raise
        self.outcomes.add("returned")
        return value


async def serve(
    case: Case,
    middleware: IdempotentMiddleware,
    handler: Any,
    sends: Sequence[tuple[str, str]],
    outcomes: Outcomes,
    dead: Any = None,
    copied: asyncio.Event | None = None,
) -> None:
    """Subscribe ``handler`` behind ``middleware`` (and ``dead``, if given, plainly on the
    dead letters' destination), publish ``sends`` (order, key) and wait (30 s at most) for
    the outcomes expected (and for ``copied``)."""
    broker = case.broker()
    router = case.router([outcomes, middleware])
    case.subscribe(router)(handler)
    broker.include_router(router)
    if dead is not None:
        plain = case.router([])
        case.subscribe_dead(plain)(dead)
        broker.include_router(plain)
    async with broker:
        await broker.start()
        for order, key in sends:
            await case.publish(broker, {"order": order}, {"idempotency-key": key})
        await asyncio.wait_for(outcomes.done.wait(), 30)
        if copied is not None:
            await asyncio.wait_for(copied.wait(), 30)


def test_a_duplicate_runs_the_handler_once(case: Case) -> None:
    guard, scope = Guard(open_store("memory://")), f"stock-{uuid.uuid4().hex[:8]}"
    calls: Counter[str] = Counter()
    outcomes = Outcomes(4)

    async def reserve(body: dict[str, str]) -> str:
        calls.update([body["order"]])
        return "reserved"

    sends = [("o1", "order:1"), ("o1", "order:1"), ("o2", "order:2"), ("o1", "order:1")]
    middleware = IdempotentMiddleware(guard, scope, in_flight_delay=0.1)
    asyncio.run(serve(case, middleware, reserve, sends, outcomes))
    assert calls == Counter({"o1": 1, "o2": 1})
    assert outcomes.seen.count("returned") == 2
    assert outcomes.seen.count("AckMessage") == 2  # the copies, acked without running


class InFlight(logging.Handler):
    """Set once the consumer logged a copy whose key was held by a run elsewhere."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "outcome=in_progress" in record.getMessage():
            self.seen.set()


def test_copies_at_two_consumers_at_once_run_once(case: Case) -> None:
    """Two brokers (two connections, as two processes have) consume one queue, durable or
    group; the first copy's run holds its key until the second copy, at the other consumer,
    was found in flight (RabbitMQ holds it and requeues it, JetStream naks it, Redis runs it
    again in place); then the second is acked without running."""
    if case.name == "kafka":
        pytest.skip("a partition is read by one group member: its copies never reach two at once")
    guard, scope = Guard(open_store("memory://")), f"stock-{uuid.uuid4().hex[:8]}"
    calls: Counter[str] = Counter()
    in_flight = InFlight()
    outcomes = Outcomes(2)

    async def reserve(body: dict[str, str]) -> None:
        calls.update([body["order"]])
        assert await asyncio.to_thread(in_flight.seen.wait, 30), "the copy never came"

    async def run() -> None:
        brokers = []
        for _ in range(2):
            broker = case.broker()
            router = case.router(
                [outcomes, IdempotentMiddleware(guard, scope, in_flight_delay=0.1)]
            )
            case.subscribe(router)(reserve)
            broker.include_router(router)
            brokers.append(broker)
        async with brokers[0], brokers[1]:
            for broker in brokers:
                await broker.start()
            for _ in range(2):
                await case.publish(brokers[0], {"order": "o1"}, {"idempotency-key": "order:1"})
            await asyncio.wait_for(outcomes.done.wait(), 30)

    logger = logging.getLogger("mideng")
    logger.addHandler(in_flight)
    try:
        asyncio.run(run())
    finally:
        logger.removeHandler(in_flight)
    assert calls == Counter({"o1": 1})
    assert sorted(o for o in outcomes.seen if o in TERMINAL) == ["AckMessage", "returned"]
    if case.handed_back is not None:
        assert case.handed_back in outcomes.seen


def test_a_handler_failing_then_succeeding_has_its_effect_once(case: Case) -> None:
    guard, scope = Guard(open_store("memory://")), f"stock-{uuid.uuid4().hex[:8]}"
    calls: Counter[str] = Counter()
    effects: Counter[str] = Counter()
    outcomes = Outcomes(1)

    async def reserve(body: dict[str, str]) -> None:
        calls.update([body["order"]])
        if calls[body["order"]] == 1:
            raise LookupError("the product is not there yet")
        effects.update([body["order"]])

    middleware = IdempotentMiddleware(guard, scope, retry_delay=0.05)
    sends = [("o1", "order:1")]
    asyncio.run(serve(case, middleware, reserve, sends, outcomes))
    assert calls == Counter({"o1": 2})
    assert effects == Counter({"o1": 1})
    retried = [case.handed_back] if case.handed_back is not None else []
    assert outcomes.seen == [*retried, "returned"]
    record = guard.get(scope, "order:1")
    assert record is not None
    assert record.status is Status.SUCCEEDED


def test_a_handler_that_keeps_failing_is_given_up_after_its_attempts(case: Case) -> None:
    guard, scope = Guard(open_store("memory://")), f"stock-{uuid.uuid4().hex[:8]}"
    calls: Counter[str] = Counter()
    outcomes = Outcomes(2)

    async def reserve(body: dict[str, str]) -> None:
        calls.update([body["order"]])
        raise LookupError("no such product")

    middleware = IdempotentMiddleware(guard, scope, retry_delay=0.05, max_attempts=2)
    sends = [("o1", "order:1"), ("o2", "")]  # o2 has no key: given up, never run
    asyncio.run(serve(case, middleware, reserve, sends, outcomes))
    assert calls == Counter({"o1": 2})
    assert outcomes.seen.count("RejectMessage") == 2
    record = guard.get(scope, "order:1")
    assert record is not None
    assert record.status is Status.FAILED


def test_a_dead_letter_is_copied_where_the_middleware_names(case: Case) -> None:
    """With ``dead_letter=``: the copy (body, headers, the reason) is published through the
    subscriber's broker, then the message is acked."""
    guard, scope = Guard(open_store("memory://")), f"stock-{uuid.uuid4().hex[:8]}"
    outcomes = Outcomes(1)
    copies: list[tuple[Any, dict[str, Any]]] = []
    copied = asyncio.Event()

    async def reserve(body: dict[str, str]) -> None:
        raise LookupError("no such product")

    async def dead(body: dict[str, str], message: Delivered) -> None:
        copies.append((body, dict(message.headers)))
        copied.set()

    destination, options = case.dead_letter()
    middleware = IdempotentMiddleware(
        guard, scope, max_attempts=1, dead_letter=destination, dead_letter_options=options
    )

    sends = [("o1", "order:1")]
    asyncio.run(serve(case, middleware, reserve, sends, outcomes, dead, copied))
    assert outcomes.seen == ["RejectMessage"]
    [(body, headers)] = copies
    assert body == {"order": "o1"}
    assert headers["idempotency-key"] == "order:1"
    reason_header = "x-dead-reason" if case.name == "rabbit" else "x-dead-letter-reason"
    assert "failed 1 time(s)" in headers[reason_header]


def test_a_dead_letter_whose_copy_is_refused_comes_back(broker_names: BrokerNames) -> None:
    """RabbitMQ: a copy to a queue that does not exist is returned unroutable; the message
    is not acked without it, but held and requeued, and refused again, never lost."""
    case = Rabbit(broker_names)
    guard, scope = Guard(open_store("memory://")), f"stock-{uuid.uuid4().hex[:8]}"
    outcomes = Outcomes(2, of=frozenset({"SkipMessage"}))

    async def reserve(body: dict[str, str]) -> None:
        raise LookupError("no such product")

    nowhere = broker_names.name("no-such-queue")
    middleware = IdempotentMiddleware(guard, scope, max_attempts=1, dead_letter=nowhere)
    asyncio.run(serve(case, middleware, reserve, [("o1", "order:1")], outcomes))
    assert outcomes.seen[:2] == ["SkipMessage", "SkipMessage"]  # held twice: delivered twice


def test_under_a_manual_ack_policy_the_middleware_still_settles(
    broker_names: BrokerNames,
) -> None:
    """RabbitMQ with ``AckPolicy.MANUAL`` (FastStream acks nothing): the run and the copy are
    both acked by the middleware, so nothing is left in the queue once the broker closed."""
    case = Rabbit(broker_names)
    case.ack_policy = AckPolicy.MANUAL
    guard, scope = Guard(open_store("memory://")), f"stock-{uuid.uuid4().hex[:8]}"
    outcomes = Outcomes(2)
    calls: Counter[str] = Counter()

    async def reserve(body: dict[str, str]) -> None:
        calls.update([body["order"]])

    sends = [("o1", "order:1"), ("o1", "order:1")]
    asyncio.run(serve(case, IdempotentMiddleware(guard, scope), reserve, sends, outcomes))
    assert calls == Counter({"o1": 1})
    assert asyncio.run(_left_in(case.queue)) == 0  # unacked ones were requeued at the close


async def _left_in(queue: str) -> int:
    import aio_pika

    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        count: int = declared.declaration_result.message_count
        return count


def test_a_batch_is_refused_not_run() -> None:
    """A batch subscriber's message holds a list of bodies: one key cannot stand for it."""
    from faststream.message import StreamMessage

    batch = StreamMessage(raw_message=[b"a", b"b"], body=[b"a", b"b"])
    with pytest.raises(TypeError, match="one message at a time"):
        settling_for(batch).message(batch)


class Shop:
    """A database with the record table and a table the handler writes to."""

    def __init__(self, url: str, async_url: str | None) -> None:
        suffix = uuid.uuid4().hex[:10]
        self.table, self.moves = f"mideng_fs_{suffix}", f"moves_fs_{suffix}"
        self.store = open_store(url, table=self.table)
        self.guard = Guard(self.store, lease=30)
        self.engine = create_engine(url)
        self.async_url = async_url
        with self.engine.begin() as conn:
            conn.execute(text(f"CREATE TABLE {self.moves} (order_key VARCHAR(64) NOT NULL)"))

    def moved(self) -> list[str]:
        with self.engine.connect() as conn:
            return sorted(r[0] for r in conn.execute(text(f"SELECT order_key FROM {self.moves}")))

    def close(self, server: bool) -> None:
        self.store.close()
        with self.engine.begin() as conn:
            conn.execute(text(f"DROP TABLE {self.moves}"))
            if server:
                conn.execute(text(f"DROP TABLE {self.table}"))
        self.engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Shop]:
    if request.param == "sqlite":
        made = Shop(f"sqlite:///{tmp_path / 'shop.db'}", None)
    else:
        need("postgresql")
        made = Shop(POSTGRES_URL, POSTGRES_URL)  # psycopg serves both sides
    yield made
    made.close(server=request.param != "sqlite")


def test_the_transactional_variant_commits_the_write_with_the_record(
    case: Case, shop: Shop
) -> None:
    """SQLite through an Engine (the transaction off the loop), PostgreSQL through an
    AsyncEngine: the write and the record commit together; the failed run's write rolls
    back with it, and its retry writes once."""
    calls: Counter[str] = Counter()
    outcomes = Outcomes(3)
    insert = text(f"INSERT INTO {shop.moves} (order_key) VALUES (:k)")

    async def move(body: dict[str, str], conn: Connection) -> None:
        order = body["order"]
        calls.update([order])
        if shop.async_url is None:
            conn.execute(insert, {"k": order})
        else:
            await conn.execute(insert, {"k": order})
        if order == "bad" and calls[order] == 1:
            raise LookupError("rolled back with its insert")

    engine = create_engine(shop.engine.url) if shop.async_url is None else None
    aengine = create_async_engine(shop.async_url) if shop.async_url is not None else None
    middleware = IdempotentMiddleware(
        shop.guard, "moves", engine=engine or aengine, retry_delay=0.05, in_flight_delay=0.1
    )
    sends = [("o1", "order:1"), ("bad", "order:bad"), ("o1", "order:1")]
    try:
        asyncio.run(serve(case, middleware, move, sends, outcomes))
    finally:
        if engine is not None:
            engine.dispose()
        if aengine is not None:
            asyncio.run(aengine.dispose())
    assert shop.moved() == ["bad", "o1"]
    assert calls == Counter({"o1": 1, "bad": 2})
    for key in ("order:1", "order:bad"):
        record = shop.guard.get("moves", key)
        assert record is not None
        assert record.status is Status.SUCCEEDED
