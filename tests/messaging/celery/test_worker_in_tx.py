"""``idempotent_task(..., engine=)`` with real worker processes (tests/messaging/celery/app.py)
on RabbitMQ: the body's effect row and the dedup record commit in one transaction, on
PostgreSQL and MariaDB. Three sends of one business task while the first transaction is open:
one effect. A pool process SIGKILLed before the commit: the redelivery runs it again, one
effect. SIGKILLed after the commit, before the ack: the redelivery returns without running.
A body error (on PostgreSQL): its write rolls back with the record and Celery's autoretry runs
it again."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.brokers import BrokerNames
from tests.helpers.storm import Tables, on_each_database, tables, wait_for
from tests.messaging.celery.conftest import Workers
from tests.services import POSTGRES_URL, need

pytestmark = pytest.mark.slow

TASK = "deduct_stock_in_tx"
RESULT = {"order": "1001", "deducted": 2}


@pytest.fixture
def postgres() -> Iterator[Tables]:
    need("postgresql")
    need("redis")
    with tables(POSTGRES_URL) as made:
        yield made


@pytest.fixture
def db(service: str, url: str) -> Iterator[Tables]:
    need(service)
    need("redis")
    with tables(url) as made:
        yield made


def lock_waits(db: Tables) -> int:
    """Transactions waiting for a row lock on the record table (a copy's claim)."""
    if db.engine.dialect.name == "postgresql":
        query = (
            "SELECT COUNT(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND query LIKE :table"
        )
    else:
        query = (
            "SELECT COUNT(*) FROM information_schema.innodb_trx "
            "WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE :table"
        )
    with db.engine.connect() as conn:
        return int(conn.execute(text(query), {"table": f"%{db.records}%"}).scalar_one())


@on_each_database
def test_three_sends_while_the_first_transaction_is_open_one_effect(
    broker_names: BrokerNames, db: Tables, tmp_path: Path
) -> None:
    workers = Workers(broker_names, db, tmp_path, MIDENG_CELERY_MODE="hold")
    sent = [workers.send(TASK, "1001", 2) for _ in range(3)]
    workers.start("a")
    workers.start("b")
    try:
        wait_for((tmp_path / "started").exists, 60, "the first run to start")
        # A copy on the other worker claims the key and waits on the first one's row lock.
        wait_for(lambda: lock_waits(db) == 1, 60, "a copy to wait for the first transaction")
        (tmp_path / "release").write_text("")
        results = [result.get(timeout=60) for result in sent]
    finally:
        workers.stop()
    output = workers.logs()
    assert results == [RESULT] * 3, output
    assert db.effects_by_key() == {"order:1001": 1}
    assert db.records_by_status() == {"succeeded": 1}
    assert len(workers.lines("runs")) == 1, output  # the copies replayed without running
    assert len(workers.lines("finished")) == 3


@on_each_database
def test_killed_before_the_commit_the_redelivery_runs_it_once(
    broker_names: BrokerNames, db: Tables, tmp_path: Path
) -> None:
    workers = Workers(broker_names, db, tmp_path, MIDENG_CELERY_MODE="kill_before_commit")
    sent = workers.send(TASK, "1001", 2)
    workers.start("a")
    workers.start("b")
    try:
        started = tmp_path / "started"
        wait_for(started.exists, 60, "the run to insert its effect and park before the commit")
        killed = int(started.read_text())
        os.kill(killed, signal.SIGKILL)  # the pool process, inside the open transaction
        (tmp_path / "killed").write_text("")
        result = sent.get(timeout=60)
    finally:
        workers.stop()
    output = workers.logs()
    assert result == RESULT, output
    assert "WorkerLostError" in output  # the kill was seen, and its message given back
    runs = workers.lines("runs")
    assert len(runs) == 2, output  # the killed run and the redelivery's
    # The killed run's insert rolled back with its record; the redelivery's is the one.
    assert db.effect_pids("order:1001") == [int(runs[1])] != [killed]
    assert db.records_by_status() == {"succeeded": 1}


@on_each_database
def test_killed_after_the_commit_before_the_ack_the_redelivery_does_not_run(
    broker_names: BrokerNames, db: Tables, tmp_path: Path
) -> None:
    workers = Workers(broker_names, db, tmp_path, MIDENG_CELERY_MODE="kill_after_commit")
    sent = workers.send(TASK, "1001", 2)
    workers.start("a")
    workers.start("b")
    try:
        committed = tmp_path / "committed"
        wait_for(committed.exists, 60, "the run to commit and park before the ack")
        assert db.effects_by_key() == {"order:1001": 1}  # committed, the message not acked
        killed = int(committed.read_text())
        os.kill(killed, signal.SIGKILL)
        (tmp_path / "killed").write_text("")
        # The killed delivery never finished; its redelivery does, replayed from the record.
        wait_for(lambda: len(workers.lines("finished")) == 1, 60, "the redelivery to finish")
        result = sent.get(timeout=60)
    finally:
        workers.stop()
    output = workers.logs()
    assert "WorkerLostError" in output, output  # the message was given back, and came again
    assert "key=order:1001 outcome=replay" in output  # the redelivery found the record
    assert result == RESULT
    assert workers.lines("runs") == [str(killed)], output  # the body ran once, in the victim
    assert db.effect_pids("order:1001") == [killed]
    assert db.records_by_status() == {"succeeded": 1}


def test_a_body_error_rolls_back_its_write_and_celery_retries_it(
    broker_names: BrokerNames, postgres: Tables, tmp_path: Path
) -> None:
    db = postgres
    workers = Workers(broker_names, db, tmp_path, MIDENG_CELERY_MODE="fail")
    sent = workers.send(TASK, "1001", 2)
    workers.start("a")
    try:
        result = sent.get(timeout=60)
    finally:
        workers.stop()
    output = workers.logs()
    assert result == RESULT, output
    runs = workers.lines("runs")
    assert len(runs) == 3, output  # two LookupErrors, autoretried, then the success
    assert output.count("LookupError") >= 2
    assert db.effects_by_key() == {"order:1001": 1}  # the failed runs' inserts rolled back
    assert db.records_by_status() == {"succeeded": 1}
