"""Dramatiq with real workers on RabbitMQ and on Redis: the kill storm
(tests/messaging/task_queues/storm.py). On RabbitMQ the killed worker's message comes back
when its connection drops; on Redis once its heartbeat is stale."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from mideng.messaging.task_queue import Enqueue
from tests.messaging.task_queues import storm
from tests.services import need


@pytest.mark.parametrize("kind", ["rabbitmq", "redis"])
def test_a_sigkilled_worker_leaves_every_key_run_once(kind: str, tmp_path: Path) -> None:
    need(kind)
    from tests.messaging.dramatiq.app import queue

    app = importlib.import_module(f"tests.messaging.dramatiq.app_{kind}")
    touch = app.touch
    with storm.storm(tmp_path) as made:
        try:
            storm.enqueue_all(made, touch.enqueue)
            run = [
                sys.executable, "-m", "dramatiq", f"tests.messaging.dramatiq.app_{kind}",
                "--processes", "1", "--threads", "1", "--queues", queue(kind),
            ]  # fmt: skip
            made.start(run, "a", hold_at=20)
            made.start(run, "b", hold_at=0)
            held = made.kill_the_holder()
            storm.check_exactly_once(made, held)
            assert {touch.enqueue(key).state for key in made.key_names()} == {Enqueue.DONE}
        finally:
            app.broker.flush_all()
            if kind == "rabbitmq":  # the queue, its delay queue and its dead letters
                for name in (queue(kind), f"{queue(kind)}.DQ", f"{queue(kind)}.XQ"):
                    app.broker.channel.queue_delete(name)
            app.broker.close()
