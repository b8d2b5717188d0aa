"""``mideng relay`` on a broker or database it cannot reach, or a URL option the client
refuses: one clear error line and an exit code, never a traceback out of the command."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine

from mideng.cli import main
from mideng.outbox import Outbox
from tests.brokers import spare_port
from tests.services import REDIS_URL


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    engine = create_engine(url)
    Outbox(engine).create_schema()
    engine.dispose()
    return url


@pytest.mark.parametrize("scheme", ["amqp", "redis", "kafka", "nats"])
@pytest.mark.parametrize("once", [True, False])
def test_a_dead_broker_is_one_error_and_exit_1(
    db_url: str, scheme: str, once: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # NATS took two minutes (nats-py's 61 connect attempts, 2 s apart), each failed attempt
    # logged with its traceback, before its error.
    port = spare_port()  # nothing listens there
    broker = {
        "amqp": f"amqp://guest:guest@127.0.0.1:{port}/",
        "redis": f"redis://127.0.0.1:{port}/0",
        "kafka": f"kafka://127.0.0.1:{port}",
        "nats": f"nats://127.0.0.1:{port}",
    }[scheme]
    args = ["relay", "--db", db_url, "--broker", broker, *(["--once"] if once else [])]
    began = time.monotonic()
    result = CliRunner().invoke(main, args)
    assert time.monotonic() - began < 15
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: ")
    assert len(result.output.splitlines()) == 1, result.output
    assert [record.getMessage() for record in caplog.records if record.exc_info] == []


def test_a_database_it_cannot_reach_is_one_error_and_exit_1() -> None:
    db = f"postgresql://postgres@127.0.0.1:{spare_port()}/test"
    result = CliRunner().invoke(main, ["relay", "--db", db, "--broker", REDIS_URL, "--once"])
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1, result.output
    assert "Error: " in result.output


def test_a_url_option_the_client_refuses_is_a_usage_error(db_url: str) -> None:
    broker = f"{REDIS_URL}?no_such_option=1"
    result = CliRunner().invoke(main, ["relay", "--db", db_url, "--broker", broker, "--once"])
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert "Error: " in result.output
