"""RQ with real workers: the kill storm (tests/messaging/task_queues/storm.py)."""

from __future__ import annotations

from pathlib import Path

from mideng.messaging.task_queue import Enqueue
from tests.messaging.task_queues import storm
from tests.services import need


def test_a_sigkilled_worker_leaves_every_key_run_once(tmp_path: Path) -> None:
    need("redis")
    from rq import Queue

    from tests.messaging.rq.app import touch

    with storm.storm(tmp_path) as made:
        queue_name = f"{made.prefix}-{made.run}-rq"
        queue = Queue(queue_name, connection=made.redis)
        storm.enqueue_all(made, lambda key: touch.enqueue(queue, key))
        run = made.python("from tests.messaging.rq.app import main; main()")
        made.start(run, "a", hold_at=20, MIDENG_TQ_QUEUE=queue_name)
        made.start(run, "b", hold_at=0, MIDENG_TQ_QUEUE=queue_name)
        held = made.kill_the_holder()
        storm.check_exactly_once(made, held)
        assert {touch.enqueue(queue, key).state for key in made.key_names()} == {Enqueue.DONE}
