"""Celery with real worker processes on RabbitMQ, ``acks_late`` and
``task_reject_on_worker_lost``: one business task sent three times (three task ids, one key)
and the worker process running it SIGKILLed mid-task. The killed delivery comes back; the
copies that find the key running elsewhere are retried later; the body's effect exists once,
and every send gets the one result."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.brokers import BrokerNames
from tests.helpers.storm import Tables, tables, wait_for
from tests.messaging.celery.conftest import Workers
from tests.services import POSTGRES_URL, need

pytestmark = pytest.mark.slow


@pytest.fixture
def db() -> Iterator[Tables]:
    need("postgresql")
    with tables(POSTGRES_URL) as made:
        yield made


def test_three_sends_and_a_killed_worker_one_effect(
    broker_names: BrokerNames, db: Tables, tmp_path: Path
) -> None:
    need("redis")
    workers = Workers(broker_names, db, tmp_path)
    sent = [workers.send("deduct_stock", "1001", 2) for _ in range(3)]
    workers.start("a")
    workers.start("b")

    def retried() -> bool:
        return "retry: Retry in" in workers.logs()

    try:
        started = tmp_path / "started"
        wait_for(started.exists, 60, "the first run to start")
        # While the first run sits in its body, a copy on the other worker meets it in flight.
        wait_for(retried, 60, "a copy to be retried while the first run holds the key")
        os.kill(int(started.read_text()), signal.SIGKILL)  # the pool process running it
        (tmp_path / "killed").write_text("")
        results = [result.get(timeout=60) for result in sent]
    finally:
        workers.stop()
    output = workers.logs()
    assert results == [{"order": "1001", "deducted": 2}] * 3, output
    assert db.effects_by_key() == {"order:1001": 1}
    # Two runs: the killed one (no effect) and the one that took the key over after its lease.
    assert len(workers.lines("runs")) == 2, output
    assert "WorkerLostError" in output  # the kill was seen, and its message given back
