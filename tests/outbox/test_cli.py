"""``mideng relay``: --once publishes everything committed and exits 0; bad URLs are usage
errors that publish nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from sqlalchemy import create_engine

from mideng.cli import main
from mideng.outbox import Outbox
from tests.brokers import BrokerNames, spare_port
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
