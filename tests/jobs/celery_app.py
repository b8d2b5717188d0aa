"""The Celery app of the beat test: one mideng job every second, sent by every beat that
runs this module. Configured from the environment the test sets: the broker, a queue of its
own, the store, the job's name, and the folder each execution leaves a file in
(``<slot>.<outcome>.<id>``, by the worker's ``task_postrun``)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from celery import Celery  # type: ignore[import-untyped]
from celery.signals import task_postrun  # type: ignore[import-untyped]

from mideng import Guard
from mideng.jobs import Every, Job, JobContext, slot_key
from mideng.jobs.celery import SLOT, slot_task

OUT = Path(os.environ["MIDENG_TEST_JOBS_DIR"])
QUEUE = os.environ["MIDENG_TEST_QUEUE"]

app = Celery("mideng_jobs_beat_test", broker=os.environ["MIDENG_TEST_BROKER"])
app.conf.update(
    task_default_queue=QUEUE,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    beat_max_loop_interval=1,
)
guard = Guard(os.environ["MIDENG_TEST_STORE"])


def tick(context: JobContext) -> None:
    (OUT / f"{context.key}.job.{uuid.uuid4().hex}").write_text(str(context.fence))


task = slot_task(app, guard, Job(os.environ["MIDENG_TEST_JOB"], tick, Every(1)), queue=QUEUE)


@task_postrun.connect  # type: ignore[untyped-decorator]
def executed(kwargs: dict[str, Any] | None = None, retval: Any = None, **_: Any) -> None:
    slot = (kwargs or {}).get(SLOT)
    key = "none" if slot is None else slot_key(float(slot))
    outcome = retval if isinstance(retval, str) else type(retval).__name__  # Retry
    (OUT / f"{key}.{outcome}.{uuid.uuid4().hex}").write_text("")
