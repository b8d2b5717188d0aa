"""The kill storm every task queue runs: 300 keys enqueued, 30 of them twice; two worker
processes; the process running one job SIGKILLed mid-job (before the job's effect); then every
key's effect exactly once, every pending mark freed, and a later enqueue of any key answered
DONE without sending.

Each worker runs one job at a time, so the killed process has only the held job in hand: a
kill landing in another job between its effect (a Redis write, outside the record's store
transaction) and its record's completion would have that effect run again by the redelivery,
which no guard can tell from a run that never got that far (docs/task-queues.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis

from mideng.messaging.task_queue import Enqueue, Enqueued
from tests.brokers import stop_broker, token
from tests.helpers.storm import ROOT, wait_for
from tests.messaging.task_queues import effects
from tests.services import REDIS_URL

KEYS = 300
TWICE = 30


@dataclass
class Storm:
    """One storm's names and worker processes."""

    workdir: Path
    prefix: str = effects.PREFIX
    #: This storm's keys' prefix: the scope is the test process's, the keys this storm's own.
    run: str = field(default_factory=token)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def scope(self) -> str:
        return effects.SCOPE

    def key_names(self) -> list[str]:
        return [f"{self.run}-{n:03d}" for n in range(KEYS)]

    @property
    def redis(self) -> Redis:
        return Redis.from_url(REDIS_URL, decode_responses=True)

    def env(self, worker: str, hold_at: int, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
            "MIDENG_TQ_PREFIX": self.prefix,
            "MIDENG_TQ_WORKER": worker,
            "MIDENG_TQ_HOLD_AT": str(hold_at),
            **extra,
        }

    def start(self, command: list[str], worker: str, hold_at: int, **extra: str) -> None:
        with (self.workdir / f"worker-{worker}.log").open("ab") as log:
            self.processes.append(
                subprocess.Popen(
                    command,
                    cwd=ROOT,
                    env=self.env(worker, hold_at, **extra),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )

    def python(self, code: str) -> list[str]:
        return [sys.executable, "-c", code]

    def effects(self) -> dict[str, int]:
        """This storm's keys' effect counts (the hash is the test process's)."""
        raw: dict[str, str] = self.redis.hgetall(f"{self.prefix}:effects")  # type: ignore[assignment]
        return {k: int(v) for k, v in raw.items() if k.startswith(f"{self.run}-")}

    def starts(self) -> list[str]:
        return [str(s) for s in self.redis.lrange(f"{self.prefix}:started", 0, -1)]

    def kill_the_holder(self, timeout: float = 20.0) -> str:
        """Wait for the held job; SIGKILL the process running it; the held key."""
        held = f"{self.prefix}:held"
        try:
            wait_for(lambda: self.redis.llen(held) > 0, timeout, "a worker to hold a job")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None
        pid, key = str(self.redis.lindex(held, 0)).split()
        os.kill(int(pid), signal.SIGKILL)
        return key

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-6000:]}"
            for path in sorted(self.workdir.glob("worker-*.log"))
        )

    def stop(self) -> None:
        for process in self.processes:
            stop_broker(process)  # SIGTERM, then SIGKILL after 10 s
        # The effect hash and the start list are the test process's; this storm is done with them.
        names = list(self.redis.scan_iter(f"{self.prefix}:*"))
        if names:
            self.redis.delete(*names)


@contextmanager
def storm(workdir: Path) -> Iterator[Storm]:
    made = Storm(workdir)
    try:
        yield made
    finally:
        made.stop()


def enqueue_all(made: Storm, enqueue: Callable[[str], Enqueued]) -> list[Enqueued]:
    """Every key once, then the first TWICE keys again while their jobs are pending: those
    send nothing and name the pending job."""
    first = [enqueue(key) for key in made.key_names()]
    assert [a.state for a in first] == [Enqueue.QUEUED] * KEYS
    again = [enqueue(key) for key in made.key_names()[:TWICE]]
    assert [a.state for a in again] == [Enqueue.PENDING] * TWICE
    assert [a.job_id for a in again] == [a.job_id for a in first[:TWICE]]
    assert len({a.job_id for a in first}) == KEYS
    return first


def check_exactly_once(made: Storm, held: str, timeout: float = 30.0) -> float:
    """Every key's effect once, the held key started twice (its redelivery took it over), every
    pending mark freed; the seconds from the kill until the last effect."""
    killed_at = time.monotonic()
    try:
        wait_for(lambda: len(made.effects()) == KEYS, timeout, "every key's effect")
    except AssertionError:
        raise AssertionError(f"{len(made.effects())} effects\n{made.logs()}") from None
    took = time.monotonic() - killed_at
    counts = made.effects()
    assert set(counts) == set(made.key_names())
    assert [k for k, n in counts.items() if n != 1] == []
    assert made.starts().count(held) == 2, made.logs()
    pending = f"{made.scope}#pending"
    get = effects.guard().store.get
    wait_for(
        lambda: all(get(pending, f"storm:{k}") is None for k in made.key_names()), 10, "marks freed"
    )
    return took
