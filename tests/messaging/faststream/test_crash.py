"""A FastStream worker killed (SIGKILL) in the middle of a run: RabbitMQ requeues the
delivery its connection held; the next worker gets it once the dead worker's lease (kept by
its heartbeat until it died) has run out, 1 s later, holding it back while it has not, and
takes the key over: the handler's effect happens once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.brokers import AMQP_URL, BrokerNames
from tests.helpers.effects import child, create, rows


def _worker(queue: str, store: str, effects: Path, run: float) -> subprocess.Popen[bytes]:
    module = "tests.messaging.faststream.worker"
    return child(module, queue, store, str(effects), str(run), "1.0")


def _wait(effects: Path, table: str, count: int, worker: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while len(rows(effects, table)) < count:  # rows another process writes, polled
        assert worker.poll() is None, "the worker ended"
        assert time.monotonic() < deadline, f"no {count} {table} rows"
        time.sleep(0.05)


async def _publish(queue: str) -> None:
    from faststream.rabbit import RabbitBroker, RabbitQueue

    async with RabbitBroker(AMQP_URL) as broker:
        await broker.declare_queue(RabbitQueue(queue, durable=True))
        await broker.publish({"order": "o1"}, queue, headers={"idempotency-key": "order:1"})


@pytest.mark.slow
def test_a_worker_killed_mid_run_is_taken_over_once(
    broker_names: BrokerNames, tmp_path: Path
) -> None:
    queue = broker_names.rabbitmq_queue()
    effects = create(tmp_path / "effects.db")
    store = f"sqlite:///{tmp_path / 'records.db'}"
    first = _worker(queue, store, effects, run=30.0)
    second: subprocess.Popen[bytes] | None = None
    try:
        asyncio.run(_publish(queue))
        _wait(effects, "began", 1, first)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        second = _worker(queue, store, effects, run=0.1)
        _wait(effects, "effects", 1, second)
    finally:
        for worker in (first, second):
            if worker is not None and worker.poll() is None:
                worker.kill()
                worker.wait(timeout=30)
    assert rows(effects, "began") == ["o1", "o1"]  # the killed run, and the take-over
    assert rows(effects, "effects") == ["o1"]
