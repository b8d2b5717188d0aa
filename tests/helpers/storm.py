"""The parent side of every broker's storm and crash tests (tests/helpers/storm_worker.py runs
the consumers): the tables, the worker processes, the kills, and the end state's checks.

A broker test supplies a ``Side``: how to publish, the adapter's arguments, and whether the
broker still holds anything unsettled (pending, unacked, uncommitted): the base broker suite's
broker under test (tests/messaging/base/broker.py), which each broker's broker.py gives.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from mideng.messaging.headers import IDEMPOTENCY_KEY
from mideng.schema.tables import audit_table, records
from mideng.stores.sql import SQLStore
from tests.brokers import token
from tests.services import MYSQL_URL, POSTGRES_URL

ROOT = Path(__file__).resolve().parent.parent.parent

#: A storm test's ``service`` and ``url``: once on PostgreSQL, once on MariaDB.
on_each_database = pytest.mark.parametrize(
    ("service", "url"),
    [("postgresql", POSTGRES_URL), ("mysql", MYSQL_URL)],
    ids=["postgresql", "mariadb"],
)


class Side(Protocol):
    broker: str  # the adapter's broker in mideng.messaging.brokers
    url: str
    lease: float  # the consumers' lease (a Redis Streams take-over waits that long)

    def publish(self, messages: list[tuple[str, bytes]]) -> object:
        """Each (business key, body) as a new broker message, the key in IDEMPOTENCY_KEY."""

    def adapter(self, slot: int = 0) -> dict[str, Any]:
        """The adapter's keyword arguments (stream, durable, topic, group ...) for a slot."""

    def settled(self) -> bool:
        """Nothing pending, unacked or uncommitted is left on the broker."""

    def state(self) -> str:
        """What the broker holds, for a failure's message."""


@dataclass
class Tables:
    """An effects table (one row per handler run that committed) and a record table, on
    PostgreSQL or MariaDB."""

    db_url: str
    effects: str = field(default_factory=lambda: f"mideng_effects_{token()}")
    records: str = field(default_factory=lambda: f"mideng_records_{token()}")

    def __post_init__(self) -> None:
        self.engine = create_engine(self.db_url, poolclass=NullPool)

    def create(self) -> None:
        serial = "SERIAL" if self.engine.dialect.name == "postgresql" else "INT AUTO_INCREMENT"
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    f"CREATE TABLE {self.effects} "
                    f"(id {serial} PRIMARY KEY, order_key VARCHAR(200), pid INT)"
                )
            )
        SQLStore.from_url(self.db_url, table=self.records).close()

    def drop(self) -> None:
        with self.engine.begin() as conn:
            conn.execute(text(f"DROP TABLE IF EXISTS {self.effects}"))
            made = records(self.records)  # the record table, its steps' and its audit's
            for table in (*reversed(made.tables), audit_table(made.name)):
                conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
        self.engine.dispose()

    def config(self) -> dict[str, Any]:
        """The worker's transactional mode on these tables."""
        return {
            "mode": "transactional",
            "db_url": self.db_url,
            "record_table": self.records,
            "effects_table": self.effects,
        }

    def effects_by_key(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(f"SELECT order_key, COUNT(*) FROM {self.effects} GROUP BY order_key")
            )
            return {str(key): int(count) for key, count in rows}

    def effect_pids(self, key: str) -> list[int]:
        """The pid of each committed effect row of ``key``, in order."""
        with self.engine.connect() as conn:
            pids = conn.execute(
                text(f"SELECT pid FROM {self.effects} WHERE order_key = :key ORDER BY id"),
                {"key": key},
            )
            return [int(pid) for (pid,) in pids]

    def records_of(self, keys: list[str]) -> list[tuple[Any, ...]]:
        """What the record table holds of ``keys``: (key, status, attempts, error)."""
        quoted = "key" if self.engine.dialect.name == "postgresql" else "`key`"
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(f"SELECT {quoted}, status, attempts, error FROM {self.records}")
            )
            wanted = set(keys)
            return [tuple(row) for row in rows if str(row[0]) in wanted]

    def records_by_status(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(f"SELECT status, COUNT(*) FROM {self.records} GROUP BY status")
            )
            return {str(status): count for status, count in rows}


@contextmanager
def tables(db_url: str) -> Iterator[Tables]:
    made = Tables(db_url)
    made.create()
    try:
        yield made
    finally:
        made.drop()


class Workers:
    """Storm worker processes by slot; a slot can be killed and started again. ``config`` is
    the worker's (tests/helpers/storm_worker.py) but for the adapter's arguments, which come
    from ``side`` slot by slot."""

    def __init__(self, workdir: Path, side: Side, config: dict[str, Any]) -> None:
        self.workdir = workdir
        self.side = side
        self.config = {"broker": side.broker, "url": side.url, "lease": side.lease, **config}
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.ready: dict[int, Path] = {}

    def start(self, slot: int, **overrides: Any) -> subprocess.Popen[bytes]:
        name = f"worker-{slot}-{token()}"
        path = self.workdir / f"{name}.json"
        ready = self.workdir / f"{name}.ready"
        config = {**self.config, "adapter": self.side.adapter(slot), "ready": str(ready)}
        path.write_text(json.dumps({**config, **overrides}))
        with (self.workdir / f"worker-{slot}.log").open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.helpers.storm_worker", str(path)],
                cwd=ROOT,
                # This checkout's src first: the workers run the code under test, not whatever
                # mideng the interpreter has installed.
                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.processes[slot] = process
        self.ready[slot] = ready
        return process

    def kill(self, slot: int) -> None:
        process = self.processes[slot]
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    def stop_all(self, timeout: float = 30.0) -> list[int | None]:
        """SIGTERM each (the adapter's stop event) once it is in place; the exit codes."""
        for slot, process in self.processes.items():
            wait_for(self._started(slot, process), timeout, f"worker {slot} to start")
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for process in self.processes.values():
            try:
                codes.append(process.wait(timeout=timeout))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                codes.append(None)
        return codes

    def _started(self, slot: int, process: subprocess.Popen[bytes]) -> Callable[[], bool]:
        ready = self.ready[slot]
        return lambda: ready.exists() or process.poll() is not None

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-8000:]}"
            for path in sorted(self.workdir.glob("worker-*.log"))
        )


def wait_for(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll)


def storm_messages(count: int, keys: int, seed: int) -> list[tuple[str, bytes]]:
    """``keys`` distinct business keys, the rest of ``count`` copies of random ones, shuffled:
    a producer's re-publishes, each a new broker message."""
    rng = random.Random(seed)
    chosen = [f"order:{n}" for n in range(keys)]
    chosen += [rng.choice(chosen[:keys]) for _ in range(count - keys)]
    rng.shuffle(chosen)
    return [(key, json.dumps({"order": key, "n": i}).encode()) for i, key in enumerate(chosen)]


def headers_of(key: str) -> dict[str, str]:
    return {IDEMPOTENCY_KEY: key}


def runs_by_key(path: Path) -> dict[str, int]:
    """The worker's ``runs`` file: one line per handler run, committed or not."""
    counts: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().split():
            counts[line] = counts.get(line, 0) + 1
    return counts


@dataclass
class StormResult:
    effects: dict[str, int]
    records: dict[str, int]
    exits: list[int | None]
    #: How many keys had their effect when each kill came: the kills hit work in progress.
    kills: list[int]
    #: The workers' logs (their tails), for a failure's message.
    logs: str


def run_storm(
    side: Side,
    db: Tables,
    workdir: Path,
    *,
    messages: int = 2000,
    keys: int = 1500,
    workers: int = 3,
    kills: int = 5,
    seed: int | None = None,
    between_kills: tuple[float, float] = (0.3, 1.5),
    timeout: float = 120.0,
) -> StormResult:
    """Publish, run ``workers`` consumers, SIGKILL slot 0 at random points ``kills`` times
    (restarting it each time), wait until every key has its effect and the broker is settled,
    then stop them all."""
    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    side.publish(storm_messages(messages, keys, seed))
    pool = Workers(workdir, side, {**db.config(), "scope": "stock", "jitter": 0.002})
    for slot in range(workers):
        pool.start(slot)
    kill_points: list[int] = []
    try:
        # The kills are to hit work in progress, not a group still forming.
        wait_for(lambda: len(db.effects_by_key()) > 0, timeout, "the first effect")
        for _ in range(kills):
            time.sleep(rng.uniform(*between_kills))
            pool.kill(0)
            kill_points.append(len(db.effects_by_key()))
            pool.start(0)

        def done() -> bool:
            return len(db.effects_by_key()) >= keys and side.settled()

        try:
            wait_for(done, timeout, f"{keys} effects and a settled broker (seed {seed})", 0.5)
        except AssertionError as exc:
            done_keys = db.effects_by_key()
            missing = sorted({f"order:{n}" for n in range(keys)} - done_keys.keys())[:5]
            state = (
                f"{len(done_keys)} keys have effects; broker: {side.state()}; records "
                f"{db.records_by_status()}; missing {missing}: {db.records_of(missing)}"
            )
            raise AssertionError(f"{exc}: {state}\n{pool.logs()}") from None
    finally:
        exits = pool.stop_all()
    return StormResult(db.effects_by_key(), db.records_by_status(), exits, kill_points, pool.logs())


def check_storm(result: StormResult, *, keys: int = 1500, kills: int = 5, workers: int = 3) -> None:
    """Every key's effect exactly once, every record succeeded, the kills hit work in
    progress, and every worker stopped cleanly on SIGTERM."""
    assert len(result.kills) == kills
    assert 0 < result.kills[0] < keys, "the first kill came before or after all the work"
    assert len(result.effects) == keys
    assert set(result.effects) == {f"order:{n}" for n in range(keys)}
    assert [key for key, runs in result.effects.items() if runs != 1] == []
    assert result.records == {"succeeded": keys}
    assert result.exits == [0] * workers, result.logs  # each stopped cleanly on SIGTERM


@dataclass
class CrashResult:
    at: str
    effects_at_kill: int  # committed effect rows of the key when the process was killed
    effects: list[int]  # the pid of each committed effect row of the key, at the end
    runs: int  # handler runs of the key, committed or not
    others: dict[str, int]  # effects of the other keys published with it, at the end
    killed_pid: int
    exits: list[int | None]  # of the consumer started after the kill, on SIGTERM
    rerun_log: str  # what the consumer started after the kill logged


CRASH_KEY = "order:crash"
#: Published before the crash key: the kill and the redelivery also meet work around it.
OTHERS = [f"order:{n}" for n in range(5)]


def crash_case(
    side: Side, db: Tables, workdir: Path, at: str, timeout: float = 60.0
) -> CrashResult:
    """Five keyed messages and one more, a consumer SIGKILLed at ``at`` (before_commit /
    after_commit) while on the last, then a fresh consumer; what committed before and after."""
    side.publish([(key, json.dumps({"order": key}).encode()) for key in [*OTHERS, CRASH_KEY]])
    marker, runs = workdir / "at-crash-point", workdir / "runs"
    pool = Workers(workdir, side, {**db.config(), "scope": "stock", "runs": str(runs)})
    try:
        victim = pool.start(0, crash={"at": at, "key": CRASH_KEY, "marker": str(marker)})
        try:
            wait_for(marker.exists, timeout, f"the consumer to reach {at}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{pool.logs()}") from None
        at_kill = db.effects_by_key().get(CRASH_KEY, 0)
        pool.kill(0)
        (workdir / "worker-0.log").rename(workdir / "killed.log")
        pool.start(0)

        def recovered() -> bool:
            return len(db.effects_by_key()) == len(OTHERS) + 1 and side.settled()

        try:
            wait_for(recovered, timeout, "every key's effect and a settled broker")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {side.state()}\n{pool.logs()}") from None
    finally:
        exits = pool.stop_all()
    effects = db.effects_by_key()
    del effects[CRASH_KEY]
    return CrashResult(
        at,
        at_kill,
        db.effect_pids(CRASH_KEY),
        runs_by_key(runs)[CRASH_KEY],
        effects,
        victim.pid,
        exits,
        (workdir / "worker-0.log").read_text(),
    )


def replays(log: str, key: str) -> int:
    """How many duplicates of ``key`` a worker's log reports (acked without running)."""
    return sum(1 for line in log.splitlines() if f"key={key} " in line and "outcome=replay" in line)


def check_crash(result: CrashResult) -> None:
    """Before the commit: the insert and the dedup record rolled back with the dead
    connection, so the redelivery runs it again, once. After the commit, before the ack: the
    effect and the record are committed and the message unacked; its redelivery finds the
    record and is acked without running. Either way one effect per key, and a clean stop."""
    assert result.exits == [0], result.rerun_log
    assert result.others == dict.fromkeys(OTHERS, 1)
    if result.at == "before_commit":
        assert result.effects_at_kill == 0  # the insert was made, not committed
        assert len(result.effects) == 1
        assert result.effects[0] != result.killed_pid  # the redelivery ran it
        assert result.runs == 2  # the rolled-back run and the redelivery's
        assert replays(result.rerun_log, CRASH_KEY) == 0
    else:
        assert result.at == "after_commit"
        assert result.effects_at_kill == 1  # committed, not yet acked
        assert result.effects == [result.killed_pid]  # nobody ran it again
        assert result.runs == 1
        assert replays(result.rerun_log, CRASH_KEY) >= 1  # the redelivery came, a duplicate
