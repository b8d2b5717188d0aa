"""``mideng relay``: --once publishes everything committed and exits 0; bad URLs are usage
errors that publish nothing; a relay that takes over a killed relay's keys says so, and -v
shows each batch."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from sqlalchemy import create_engine, text

from mideng.cli import main
from mideng.outbox import Outbox
from tests.brokers import AMQP_URL, BrokerNames, spare_port
from tests.outbox.conftest import Db, declare_queue
from tests.outbox.relay_proc import spawn
from tests.services import REDIS_URL


def test_once_publishes_everything_committed_and_exits_0(
    tmp_path: Path, broker_names: BrokerNames
) -> None:
    stream = broker_names.redis_stream().stream
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    engine = create_engine(url)
    outbox = Outbox(engine, table="orders_outbox")
    outbox.create_schema()
    with engine.begin() as connection:
        for n in range(5):
            outbox.add(connection, stream, {"order": f"order:{n}"}, key=f"order:{n}")
    engine.dispose()
    args = ["relay", "--db", url, "--broker", REDIS_URL, "--table", "orders_outbox", "--once"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "published 5, failed 0, dead 0" in result.output
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert client.xlen(stream) == 5
    finally:
        client.close()
    again = CliRunner().invoke(main, args)
    assert "published 0," in again.output


def test_unknown_urls_are_usage_errors(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    for args in (
        ["--db", db, "--broker", "mqtt://broker"],
        ["--db", "oracle://db", "--broker", REDIS_URL],
        ["--db", db, "--broker", REDIS_URL, "--table", "orders; drop"],
    ):
        result = CliRunner().invoke(main, ["relay", *args, "--once"])
        assert result.exit_code == 2, result.output
        assert "Error" in result.output


@pytest.mark.parametrize("scheme", ["redis", "nats", "kafka"])
def test_an_option_the_broker_does_not_take_is_a_usage_error(tmp_path: Path, scheme: str) -> None:
    # --exchange is AMQP's alone. With a Redis broker it was a TypeError traceback; Kafka's
    # and NATS's clients refused it at their first connect, as a URL they did not take.
    broker = f"{scheme}://127.0.0.1:{spare_port()}"  # never contacted
    db = f"sqlite:///{tmp_path / 'x.db'}"
    args = ["relay", "--db", db, "--broker", broker, "--exchange", "orders", "--once"]
    result = CliRunner().invoke(main, args)
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert "'exchange'" in line
    assert "Traceback" not in result.output


def _shop(tmp_path: Path, destination: str, rows: int) -> str:
    """A SQLite outbox with ``rows`` committed rows for ``destination``, two keys taking turns;
    its URL."""
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    engine = create_engine(url)
    outbox = Outbox(engine)
    outbox.create_schema()
    with engine.begin() as connection:
        for n in range(rows):
            outbox.add(connection, destination, {"n": n}, key=f"order:{n % 2}")
    engine.dispose()
    return url


def test_once_exits_1_while_a_failed_row_waits_for_its_retry(
    tmp_path: Path, broker_names: BrokerNames
) -> None:
    # The same failing row gave exit 1, then 0 ("published 0, failed 0, dead 0" while its key
    # waited for its retry), then 1 again.
    queue = broker_names.rabbitmq_queue()  # not declared yet: the publish comes back unrouted
    url = _shop(tmp_path, queue, 1)
    engine = create_engine(url)
    with engine.begin() as connection:  # failed five times before: its next retry is 32 s on
        connection.execute(text("UPDATE mideng_outbox SET attempts = 5"))
    args = ["relay", "--db", url, "--broker", AMQP_URL, "--once"]
    try:
        failed = CliRunner().invoke(main, args)
        assert failed.exit_code == 1, failed.output
        assert failed.output.startswith("published 0, failed 1, dead 0\n")
        waiting = CliRunner().invoke(main, args)
        assert waiting.exit_code == 1, waiting.output
        assert waiting.output.startswith(
            "published 0, failed 0, dead 0\nleft pending: 1 waiting for a retry after a "
            "failed publish; the first due again in 3"
        )
        declare_queue(queue)
        with engine.begin() as connection:  # its retry time comes
            connection.execute(text("UPDATE mideng_outbox_keys SET claimed_until = 0"))
    finally:
        engine.dispose()
    sent = CliRunner().invoke(main, args)
    assert (sent.exit_code, sent.output) == (0, "published 1, failed 0, dead 0\n")


def test_once_exits_1_while_a_killed_relay_still_leases_the_keys(
    tmp_path: Path, broker_names: BrokerNames
) -> None:
    queue = broker_names.rabbitmq_queue()
    declare_queue(queue)
    url = _shop(tmp_path, queue, 8)
    log = tmp_path / "killed.log"
    killed = spawn(url, AMQP_URL, "mideng_outbox", log, lease=30.0, delay=0.5)
    try:
        deadline = time.monotonic() + 30
        while not log.read_text():  # in the middle of its batch
            assert time.monotonic() < deadline, "the relay never published"
            time.sleep(0.02)
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
    result = CliRunner().invoke(main, ["relay", "--db", url, "--broker", AMQP_URL, "--once"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("published 0, failed 0, dead 0\nleft pending: ")
    assert "leased to a relay" in result.output


@pytest.mark.parametrize("option", ["--lease", "--poll"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1"])
def test_a_lease_or_poll_that_is_not_finite_and_positive_is_a_usage_error(
    tmp_path: Path, option: str, value: str
) -> None:
    # A NaN or infinite lease never lapses: a killed relay's keys stayed leased for good.
    url = _shop(tmp_path, "orders", 1)
    args = ["relay", "--db", url, "--broker", f"redis://127.0.0.1:{spare_port()}", "--once"]
    result = CliRunner().invoke(main, [*args, option, value])
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert option.strip("-") in line


def test_a_long_running_relay_says_it_started_what_it_publishes_and_that_it_stopped(
    tmp_path: Path, broker_names: BrokerNames
) -> None:
    stream = broker_names.redis_stream().stream
    url = _shop(tmp_path, stream, 6)
    broker = REDIS_URL.replace("redis://", "redis://:s3cret@", 1)  # a password: never logged
    args = ["relay", "--db", url, "--broker", broker, "--progress", "0.3", "--poll", "0.1"]
    log = tmp_path / "relay.log"
    with log.open("w") as stderr:
        relay = subprocess.Popen([sys.executable, "-m", "mideng", *args], stderr=stderr)
    try:
        deadline = time.monotonic() + 30
        # Until a progress line after the last row went out says nothing is left.
        while not _progress(log) or not _progress(log)[-1].endswith(" 0 due now, 0 waiting"):
            assert time.monotonic() < deadline, log.read_text()
            assert relay.poll() is None, log.read_text()
            time.sleep(0.05)
    finally:
        relay.send_signal(signal.SIGTERM)
        relay.wait(timeout=30)
    said = log.read_text()
    assert relay.returncode == 0, said
    assert "s3cret" not in said
    (started,) = [line for line in said.splitlines() if "outbox relay started" in line]
    assert "table=mideng_outbox broker=redis://127.0.0.1:6379 lease=30s" in started
    published = [int(line.split("relay: ")[1].split()[0]) for line in _progress(log)]
    assert sum(published) == 6
    (stopped,) = [line for line in said.splitlines() if "outbox relay stopped" in line]
    assert stopped.endswith("stopped: 6 published, 0 failed, 0 dead since it started")
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert client.xlen(stream) == 6
    finally:
        client.close()


def _progress(log: Path) -> list[str]:
    lines = [line for line in log.read_text().splitlines() if "outbox relay: " in line]
    return [line.split(" (a retry")[0] for line in lines]


def test_the_documented_exchange_set_up_routes_each_destination_to_its_bound_queues(
    tmp_path: Path, broker_names: BrokerNames
) -> None:
    """docs/outbox.md, "Publishing to a RabbitMQ exchange": a topic exchange, a queue bound by
    a pattern, rows whose destination is the routing key. A destination no binding takes is
    refused (mandatory) and retried, never dropped."""
    exchange = broker_names.rabbitmq_exchange("orders-events")
    stock = broker_names.rabbitmq_queue("stock")
    asyncio.run(_topic(exchange, stock, "order.*"))
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    engine = create_engine(url)
    outbox = Outbox(engine)
    outbox.create_schema()
    with engine.begin() as connection:
        outbox.add(connection, "order.paid", {"order": 1}, key="order:1")
        outbox.add(connection, "order.shipped", {"order": 1}, key="order:1")
        outbox.add(connection, "refund.issued", {"order": 2}, key="order:2")  # no binding
    engine.dispose()
    args = ["relay", "--db", url, "--broker", AMQP_URL, "--exchange", exchange, "--once"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output  # the unbound row waits for its retry
    assert result.output.startswith("published 2, failed 1, dead 0\n")
    assert asyncio.run(_drained(stock)) == [b'{"order":1}', b'{"order":1}']


async def _topic(exchange: str, queue: str, pattern: str) -> None:
    import aio_pika

    async with await aio_pika.connect(AMQP_URL) as connection:
        channel = await connection.channel()
        topic = await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        bound = await channel.declare_queue(queue, durable=True)
        await bound.bind(topic, routing_key=pattern)


async def _drained(queue: str) -> list[bytes]:
    import aio_pika

    async with await aio_pika.connect(AMQP_URL) as connection:
        channel = await connection.channel()
        found = await channel.declare_queue(queue, durable=True)
        bodies = []
        while (message := await found.get(fail=False)) is not None:
            await message.ack()
            bodies.append(message.body)
        return bodies


def _relay_once(db: Db, *more: str) -> subprocess.CompletedProcess[str]:
    args = ["relay", "--db", db.url, "--broker", REDIS_URL, "--table", db.table, "--once"]
    return subprocess.run(
        [sys.executable, "-m", "mideng", *args, *more],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_relay_that_takes_over_a_killed_relays_keys_says_so_and_v_shows_each_batch(
    db: Db, tmp_path: Path, broker_names: BrokerNames
) -> None:
    stream = broker_names.redis_stream().stream
    with db.engine.begin() as connection:
        for n in range(6):
            db.outbox.add(connection, stream, {"n": n}, key=f"order:{n % 3}")
        for n in range(2):
            db.outbox.add(connection, stream, {"n": n})
    log = tmp_path / "killed.log"
    killed = spawn(db.url, REDIS_URL, db.table, log, lease=1.0, delay=0.5)
    try:
        deadline = time.monotonic() + 30
        while not log.read_text():  # in the middle of its batch: every key and row claimed
            assert time.monotonic() < deadline, "the relay never published"
            time.sleep(0.02)
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
    with db.engine.connect() as connection:
        holders = connection.execute(
            text(f"SELECT DISTINCT claimed_by FROM {db.table}_keys WHERE claimed_by IS NOT NULL")
        ).all()
        until = connection.execute(
            text(f"SELECT MAX(claimed_until) FROM {db.table}_keys")
        ).scalar_one()
    assert len(holders) == 1, holders  # one claim took the three keys
    while time.time() <= until:  # the killed relay's lease lapses
        time.sleep(0.05)

    taken = _relay_once(db, "-v")
    assert taken.returncode == 0, taken.stderr
    assert taken.stdout.startswith("published 8, failed 0, dead 0")
    said = taken.stderr.splitlines()
    (line,) = [each for each in said if "took over" in each]
    assert "WARNING" in line
    assert line.endswith(
        "outbox relay took over 3 keys and 2 unkeyed rows from a relay whose lease lapsed "
        f"(its claim {holders[0][0]})"
    )
    batches = [each.split("batch: ")[1] for each in said if "outbox relay batch: " in each]
    assert batches, taken.stderr
    assert all(" DEBUG " in each for each in said if "outbox relay batch: " in each)
    assert sum(int(each.split(" rows claimed")[0]) for each in batches) == 8
    assert batches[0].startswith("8 rows claimed, 8 published, 0 failed; 3 of 3 keys written")

    # Keys a relay let go are no take-over; without -v no batch line.
    with db.engine.begin() as connection:
        db.outbox.add(connection, stream, {"n": 6}, key="order:0")
    again = _relay_once(db)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("published 1, failed 0, dead 0")
    assert "took over" not in again.stderr
    assert "outbox relay batch" not in again.stderr


def test_v_leaves_the_callers_logging_as_it_was(tmp_path: Path, broker_names: BrokerNames) -> None:
    # In one process (a test, an embedding program) -v is for that run only.
    url = _shop(tmp_path, broker_names.redis_stream().stream, 2)
    outbox_log = logging.getLogger("mideng.outbox")
    before = outbox_log.level
    result = CliRunner().invoke(main, ["relay", "--db", url, "--broker", REDIS_URL, "--once", "-v"])
    assert result.exit_code == 0, result.output
    assert outbox_log.level == before
