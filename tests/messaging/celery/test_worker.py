"""Celery with real worker processes on RabbitMQ, ``acks_late`` and
``task_reject_on_worker_lost``: one business task sent three times (three task ids, one key)
and the worker process running it SIGKILLed mid-task. The killed delivery comes back; the
copies that find the key running elsewhere are retried later; the body's effect exists once,
and every send gets the one result."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.brokers import AMQP_URL, BrokerNames
from tests.helpers.storm import ROOT, Tables, tables, wait_for
from tests.services import POSTGRES_URL, REDIS_URL, need

pytestmark = pytest.mark.slow


@pytest.fixture
def db() -> Iterator[Tables]:
    need("postgresql")
    with tables(POSTGRES_URL) as made:
        yield made


def _worker(env: dict[str, str], queue: str, name: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        command = [sys.executable, "-m", "celery", "-A", "tests.messaging.celery.app", "worker"]
        pool = ["-P", "prefork", "-c", "1", "-Q", queue, "-n", f"{name}@%h", "-l", "INFO"]
        quiet = ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        return subprocess.Popen(
            [*command, *pool, *quiet],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def test_three_sends_and_a_killed_worker_one_effect(
    broker_names: BrokerNames, db: Tables, tmp_path: Path
) -> None:
    need("redis")
    from celery import Celery  # type: ignore[import-untyped]

    queue = broker_names.rabbitmq_queue("celery")
    exchange = broker_names.rabbitmq_exchange("celery")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "MIDENG_CELERY_BROKER": AMQP_URL,
        "MIDENG_CELERY_BACKEND": REDIS_URL,
        "MIDENG_CELERY_QUEUE": queue,
        "MIDENG_CELERY_EXCHANGE": exchange,
        "MIDENG_CELERY_DB": POSTGRES_URL,
        "MIDENG_CELERY_RECORDS": db.records,
        "MIDENG_CELERY_EFFECTS": db.effects,
        "MIDENG_CELERY_DIR": str(tmp_path),
    }
    sender = Celery("mideng_celery_sender", broker=AMQP_URL, backend=REDIS_URL)
    sender.conf.update(
        task_default_queue=queue, task_default_exchange=exchange, task_default_routing_key=queue
    )
    name = "tests.messaging.celery.app.deduct_stock"
    sent = [sender.send_task(name, args=["1001", 2]) for _ in range(3)]
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    workers = [_worker(env, queue, "a", logs[0]), _worker(env, queue, "b", logs[1])]

    def retried() -> bool:
        return any("retry: Retry in" in log.read_text(errors="replace") for log in logs)

    try:
        started = tmp_path / "started"
        wait_for(started.exists, 60, "the first run to start")
        # While the first run sits in its body, a copy on the other worker meets it in flight.
        wait_for(retried, 60, "a copy to be retried while the first run holds the key")
        os.kill(int(started.read_text()), signal.SIGKILL)  # the pool process running it
        (tmp_path / "killed").write_text("")
        results = [result.get(timeout=60) for result in sent]
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        for result in sent:
            result.forget()
        sender.close()
    output = "\n".join(log.read_text(errors="replace") for log in logs)
    assert results == [{"order": "1001", "deducted": 2}] * 3, output
    assert db.effects_by_key() == {"order:1001": 1}
    # Two runs: the killed one (no effect) and the one that took the key over after its lease.
    runs = (tmp_path / "runs").read_text().split()
    assert len(runs) == 2, output
    assert "WorkerLostError" in output  # the kill was seen, and its message given back
