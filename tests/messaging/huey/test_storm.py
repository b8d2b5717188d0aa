"""Huey with real consumers: the kill storm (tests/messaging/task_queues/storm.py). Huey takes
a job off its queue before running it, so the killed consumer's job is gone: its key stays
pending until the mark's lease runs out, and the enqueue after that sends it again; that run
takes the dead run's key over and runs it, once."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from mideng.messaging.task_queue import Enqueue
from tests.helpers.storm import wait_for
from tests.messaging.task_queues import storm
from tests.services import need


def test_a_sigkilled_consumer_leaves_every_key_run_once(tmp_path: Path) -> None:
    need("redis")
    from tests.messaging.huey.app import PENDING_FOR, huey, touch

    with storm.storm(tmp_path) as made:
        try:
            enqueued = time.monotonic()
            storm.enqueue_all(made, touch.enqueue)
            # One worker thread per consumer: a killed consumer loses every job it had in
            # flight, and the storm's job in flight is the held one.
            run = [
                sys.executable, "-m", "huey.bin.huey_consumer", "tests.messaging.huey.app.huey",
                "-w", "1", "-k", "thread", "-d", "0.05", "-m", "0.1",
            ]  # fmt: skip
            made.start(run, "a", hold_at=20)
            made.start(run, "b", hold_at=0)
            held = made.kill_the_holder()
            assert touch.enqueue(held).state is Enqueue.PENDING  # the lost job's mark holds
            others = storm.KEYS - 1
            wait_for(lambda: len(made.effects()) == others, 40, "the other keys' effects")
            wait_for(lambda: touch.enqueue(held).sent, PENDING_FOR + 10, "the mark to lapse")
            # Not before the mark claimed at enqueue ran out.
            assert time.monotonic() - enqueued >= PENDING_FOR - 0.5
            storm.check_exactly_once(made, held)
            assert {touch.enqueue(key).state for key in made.key_names()} == {Enqueue.DONE}
        finally:
            huey.flush()
