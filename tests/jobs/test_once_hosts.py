"""``mideng once`` as two hosts' crontabs run it: both start it at every tick, each as its own
process, on one store. Every slot's command runs on one host, and the other exits 0."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.services import REDIS_URL, need

TICKS = 6


def host(store: str, name: str, ran: Path, codes: list[int]) -> None:
    """One host's crontab: ``mideng once`` at each of the next TICKS seconds."""
    once = [sys.executable, "-m", "mideng", "once", name, "--store", store, "--every", "1s"]
    command = [*once, "--", "sh", "-c", f'echo "$MIDENG_SLOT" >> {ran}; sleep 0.3']
    start = int(time.time()) + 1
    for tick in range(TICKS):
        time.sleep(max(start + tick - time.time(), 0))
        done = subprocess.run(
            command,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        codes.append(done.returncode)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_two_hosts_crontabs_run_each_slots_command_once(tmp_path: Path, kind: str) -> None:
    if kind == "redis":
        need("redis")
    store = f"sqlite:///{tmp_path / 'once.db'}" if kind == "sqlite" else REDIS_URL
    name, ran = f"report{uuid.uuid4().hex[:8]}", tmp_path / "ran"
    ran.touch()
    codes: list[int] = []
    hosts = [threading.Thread(target=host, args=(store, name, ran, codes)) for _ in range(2)]
    for thread in hosts:
        thread.start()
    for thread in hosts:
        thread.join(120)
    assert codes == [0] * (2 * TICKS)  # ran (exit 0), or found its slot done or running
    slots = Counter(ran.read_text().split())
    assert slots, "no host ran the command"
    assert set(slots.values()) == {1}, slots  # no slot's command ran on both hosts
    # A host late by more than a second lands on the next slot; most ticks' slots ran.
    assert len(slots) >= TICKS - 2, slots
