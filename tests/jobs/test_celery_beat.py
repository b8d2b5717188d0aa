"""Two celery beat processes send one mideng job's task every second to a real worker on a
Redis broker: the worker gets two messages for a slot, and the job runs once per slot."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from tests.services import REDIS_URL, need

pytest.importorskip("celery")

pytestmark = pytest.mark.slow


def celery(*args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "celery", "-A", "tests.jobs.celery_app", *args]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_two_beats_one_run_per_slot(tmp_path: Path) -> None:
    need("redis")
    out = tmp_path / "runs"
    out.mkdir()
    queue = f"mideng-beat-{uuid.uuid4().hex[:8]}"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(sys.path),
        MIDENG_TEST_JOBS_DIR=str(out),
        MIDENG_TEST_QUEUE=queue,
        MIDENG_TEST_BROKER=REDIS_URL,
        MIDENG_TEST_STORE=f"sqlite:///{tmp_path / 'store.db'}",
        MIDENG_TEST_JOB=f"beat{uuid.uuid4().hex[:8]}",
    )
    worker = celery(
        "worker",
        "-P",
        "threads",
        "-c",
        "4",
        "-Q",
        queue,
        "--without-heartbeat",
        "--without-gossip",
        "--without-mingle",
        "-l",
        "WARNING",
        env=env,
    )
    beats = [
        celery("beat", "-s", str(tmp_path / f"beat{n}"), "--pidfile=", "-l", "WARNING", env=env)
        for n in range(2)
    ]
    procs = [worker, *beats]
    try:
        end = time.monotonic() + 60
        while not list(out.glob("*.job.*")) and time.monotonic() < end:
            time.sleep(0.05)
        assert list(out.glob("*.job.*")), "no job ran"
        time.sleep(5)
        for beat in beats:
            beat.send_signal(signal.SIGTERM)
        for beat in beats:
            beat.wait(20)
        time.sleep(2)  # the last messages are handled
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    jobs = Counter(p.name.split(".")[0] for p in out.glob("*.job.*"))
    executions = Counter(
        (p.name.split(".")[0], p.name.split(".")[1]) for p in out.iterdir() if ".job." not in p.name
    )
    assert len(jobs) >= 4
    assert set(jobs.values()) == {1}, jobs
    starts = sorted(datetime.strptime(k, "%Y-%m-%dT%H:%M:%S%z").timestamp() for k in jobs)
    assert starts == [starts[0] + n for n in range(len(starts))]
    # Both beats sent each slot: the second message found it done, or held (and was retried
    # when the lease had ended, and then found it done).
    for key in jobs:
        assert executions[(key, "ran")] == 1
    twice = [k for k in jobs if executions[(k, "done")] + executions[(k, "Retry")] >= 1]
    assert len(twice) >= len(jobs) - 2, executions
    assert ("none", "ran") not in executions  # every message carried its slot
