"""Races: many threads, and several processes, on the same keys -> exactly one run per key."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections import Counter as Tally
from pathlib import Path

import pytest

from mideng import Guard
from tests.backends import Opened
from tests.helpers.racer import race
from tests.runner import Runner

pytestmark = pytest.mark.slow

# (processes, threads per process, keys) per backend; the embedded store is sized to the
# issue's SQLite case, server stores to the larger server case.
SIZES = {"sqlite": (4, 8, 200)}
SERVER_SIZE = (4, 16, 500)


def test_32_threads_one_key_run_once(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store, lease=30, in_progress="wait", wait_timeout=60)
    runs = []
    lock = threading.Lock()
    barrier = threading.Barrier(32)
    answers: list[object] = []

    def body() -> int:
        with lock:
            runs.append(1)
            return len(runs)

    def caller() -> None:
        barrier.wait()
        answer = runner.call(guard, "race", "one-key", body)
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=caller) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(runs) == 1
    assert answers == [1] * 32


def test_processes_and_threads_run_each_key_once(
    shared: Opened, shared_backend: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = getattr(shared_backend, "name", "")
    processes, threads, nkeys = SIZES.get(name, SERVER_SIZE)
    assert shared.url is not None
    keys = [f"k{i}" for i in range(nkeys)]
    runs_file = tmp_path / "runs.log"
    runs_file.touch()
    ctx = multiprocessing.get_context("spawn")
    # Spawned children import the racer from tests/helpers, as the parent does.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    with ctx.Pool(processes) as pool:
        results = pool.starmap(
            race, [(shared.url, shared.options, "race", keys, threads, str(runs_file))] * processes
        )
    lines = runs_file.read_text().split()
    run_keys = Tally(lines[0::2])
    assert set(run_keys) == set(keys)
    assert [k for k, n in run_keys.items() if n != 1] == []
    run_of = dict(zip(lines[0::2], lines[1::2], strict=True))
    for key in keys:
        answers = {a for seen in results for a in seen[key]}
        assert answers == {run_of[key]}, f"{key}: callers saw {answers}"
        assert sum(len(seen[key]) for seen in results) == processes * threads
