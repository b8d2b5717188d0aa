"""The Celery tests' fixtures: an eager app for in-process tests, a record table and a
stock_moves table on each database for ``engine=``, and the worker processes
(tests/messaging/celery/app.py) with a sender on RabbitMQ and a Redis result backend."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, text

from mideng import Guard, open_store
from tests.brokers import AMQP_URL, BrokerNames, broker_names, token  # noqa: F401  (fixture)
from tests.helpers.storm import ROOT, Tables
from tests.services import MYSQL_URL, POSTGRES_URL, REDIS_URL, need

#: The tasks of tests/messaging/celery/app.py, by the name a sender sends.
TASKS = "tests.messaging.celery.app"


@dataclass
class Db:
    url: str
    guard: Guard
    engine: Engine
    moves: str

    def stock_moves(self) -> list[str]:
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(text(f"SELECT order_key FROM {self.moves}"))]

    def insert(self, conn: Connection, key: str) -> None:
        conn.execute(text(f"INSERT INTO {self.moves} (order_key) VALUES (:k)"), {"k": key})


#: A lock wait of about a second: a copy gives up on an open transaction that soon.
LOCK_WAIT: dict[str, dict[str, Any]] = {
    "sqlite": {"connect_args": {"timeout": 1.0}},
    "postgresql": {"connect_args": {"options": "-c lock_timeout=1000"}},
    "mysql": {"connect_args": {"init_command": "SET SESSION innodb_lock_wait_timeout = 1"}},
}


@contextmanager
def database(name: str, tmp_path: Path) -> Iterator[Db]:
    """A record table and a stock_moves table, a Guard over the one, an Engine for both."""
    if name == "sqlite":
        url = f"sqlite:///{tmp_path / 'shop.db'}"
    else:
        need(name)
        url = POSTGRES_URL if name == "postgresql" else MYSQL_URL
    records, moves = f"mideng_celery_{token()}", f"stock_moves_{token()}"
    store = open_store(url, table=records)
    engine = create_engine(url, **LOCK_WAIT[name])
    with engine.begin() as conn:
        conn.execute(text(f"CREATE TABLE {moves} (order_key VARCHAR(64) NOT NULL)"))
    try:
        yield Db(url, Guard(store, lease=30), engine, moves)
    finally:
        store.close()
        with engine.begin() as conn:
            conn.execute(text(f"DROP TABLE {moves}"))
            if name != "sqlite":
                conn.execute(text(f"DROP TABLE {records}"))
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    with database(str(request.param), tmp_path) as made:
        yield made


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[Db]:
    with database("sqlite", tmp_path) as made:
        yield made


@pytest.fixture
def app() -> Iterator[Any]:
    from celery import Celery  # type: ignore[import-untyped]

    made = Celery("mideng_task_test", broker="memory://", backend="cache+memory://")
    made.conf.task_always_eager = True
    made.conf.task_store_eager_result = False
    yield made
    made.close()


class Workers:
    """Worker processes of app.py on one fresh queue, and a sender for its tasks."""

    def __init__(self, names: BrokerNames, db: Tables, workdir: Path, **extra: str) -> None:
        from celery import Celery

        self.queue = names.rabbitmq_queue("celery")
        exchange = names.rabbitmq_exchange("celery")
        self.workdir = workdir
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
            "MIDENG_CELERY_BROKER": AMQP_URL,
            "MIDENG_CELERY_BACKEND": REDIS_URL,
            "MIDENG_CELERY_QUEUE": self.queue,
            "MIDENG_CELERY_EXCHANGE": exchange,
            "MIDENG_CELERY_DB": db.db_url,
            "MIDENG_CELERY_RECORDS": db.records,
            "MIDENG_CELERY_EFFECTS": db.effects,
            "MIDENG_CELERY_DIR": str(workdir),
            **extra,
        }
        self.sender = Celery("mideng_celery_sender", broker=AMQP_URL, backend=REDIS_URL)
        self.sender.conf.update(
            task_default_queue=self.queue,
            task_default_exchange=exchange,
            task_default_routing_key=self.queue,
        )
        self.processes: list[subprocess.Popen[bytes]] = []
        self.sent: list[Any] = []

    def send(self, task: str, *args: Any) -> Any:
        result = self.sender.send_task(f"{TASKS}.{task}", args=list(args))
        self.sent.append(result)
        return result

    def start(self, name: str) -> None:
        """A worker with one prefork pool process, prefetching one message at a time."""
        with (self.workdir / f"worker-{name}.log").open("ab") as sink:
            command = [sys.executable, "-m", "celery", "-A", TASKS, "worker"]
            pool = ["-P", "prefork", "-c", "1", "-Q", self.queue, "-n", f"{name}@%h", "-l", "INFO"]
            quiet = ["--without-gossip", "--without-mingle", "--without-heartbeat"]
            self.processes.append(
                subprocess.Popen(
                    [*command, *pool, *quiet],
                    cwd=ROOT,
                    env=self.env,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            )

    def logs(self) -> str:
        return "\n".join(
            log.read_text(errors="replace") for log in sorted(self.workdir.glob("worker-*.log"))
        )

    def lines(self, name: str) -> list[str]:
        """The lines app.py appended to ``name`` (``runs``, ``finished``)."""
        path = self.workdir / name
        return path.read_text().split() if path.exists() else []

    def stop(self) -> None:
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for result in self.sent:
            result.forget()
        self.sender.close()
