"""Celery through the base suite (tests/messaging/base).

Celery runs no IdempotentConsumer and no consume loop of mideng's: ``idempotent_task`` guards
the task body, keyed on its business arguments, and Celery's worker settles each message
(``acks_late``: acked once the task returned; ``task_reject_on_worker_lost``: given back
when the pool process running it dies). So each base case is skipped here with what Celery
does instead, and the class holds Celery's own scenario for it: eager tasks in process, and
worker processes (tests/messaging/celery/app.py) on RabbitMQ with a Redis result backend.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, text

from mideng import Guard
from mideng.core.record import Claim, ClaimRequest, Status
from mideng.errors import StoreUnavailableError
from mideng.messaging.celery import idempotent_task
from mideng.stores.memory import MemoryStore
from tests.brokers import BrokerNames
from tests.helpers.storm import Tables, on_each_database, tables, wait_for
from tests.http.http_apps import FlakyStore
from tests.messaging.base import BrokerSuite
from tests.messaging.celery.conftest import Db, Workers
from tests.services import POSTGRES_URL, need

TASK = "deduct_stock_in_tx"
RESULT = {"order": "1001", "deducted": 2}

#: What Celery does where a base case asks for a consume loop, by the case's name.
NOT_ON_CELERY = {
    "test_one_record_per_message_and_a_failed_run_resumes": (
        "OperationConsumer is a consume loop's consumer; a Celery task runs through its worker, "
        "where the task's body calls the operation, keyed on the task's business arguments"
    ),
    "test_killed_between_two_remote_steps_the_redelivery_resumes": (
        "OperationConsumer is a consume loop's consumer; a Celery pool process killed mid-task "
        "gives its message back (test_a_pool_process_killed_mid_task_gives_its_message_back)"
    ),
    "test_each_key_runs_once_and_a_keyless_message_is_dead_lettered": (
        "Celery keys a task on its business arguments, so no task is without a key: a send "
        "missing one is refused when sent; a second send of a key returns the first run's "
        "result unrun (test_a_second_send_returns_the_first_result_without_running)"
    ),
    "test_stop_finishes_the_message_in_hand_and_leaves_the_rest": (
        "stopping is the Celery worker's own warm shutdown on SIGTERM, which every worker "
        "test here ends with"
    ),
    "test_a_failed_run_goes_back_and_runs_again_after_its_delay": (
        "a body error is the task's error, retried by Celery's autoretry_for "
        "(test_a_body_error_rolls_back_its_write_and_celery_retries_it)"
    ),
    "test_poison_is_tried_n_times_dead_lettered_and_the_rest_go_on": (
        "Celery has no dead-letter destination of its own: a task whose retries run out "
        "ends FAILURE in the result backend, and its message is acked"
    ),
    "test_a_dead_copy_carries_the_headers_as_they_came": (
        "Celery has no dead-letter destination of its own, so no dead copy"
    ),
    "test_a_consume_cancelled_at_the_completion_runs_nothing_twice": (
        "a Celery task is not cancelled mid-run: it ends when its pool process dies, and the "
        "message comes back (test_a_pool_process_killed_mid_task_gives_its_message_back, "
        "test_a_pool_process_killed_at_a_crash_point)"
    ),
    "test_a_connection_dropped_while_waiting_for_deliveries_is_reconnected": (
        "the Celery worker reconnects to its broker through kombu; idempotent_task holds no "
        "connection of its own"
    ),
    "test_a_connection_dropped_after_the_handlers_before_the_acks_reruns_nothing": (
        "the Celery worker acks, and reconnects through kombu; a redelivery after a lost ack "
        "returns the stored result unrun "
        "(test_a_pool_process_killed_at_a_crash_point)"
    ),
    "test_a_redis_store_killed_mid_batch_and_back_empty_runs_every_key_once": (
        "Celery acks a task that raised (acks_late) and keeps StoreUnavailableError as its "
        "result; a retry is Celery's autoretry_for "
        "(test_a_store_that_is_down_fails_the_task_unrun_and_a_retry_runs_it_once)"
    ),
    "test_transactional_commits_cut_by_terminated_connections_run_every_key_once": (
        "a failed commit is the task's error, for Celery's retry options: the body's writes "
        "and the record rolled back together "
        "(test_a_pool_process_killed_at_a_crash_point)"
    ),
    "test_the_writes_and_the_record_commit_together_before_the_ack": (
        "the task's transaction commits before the task returns, and so before Celery's ack "
        "(test_the_write_and_the_record_commit_together_and_a_copy_replays)"
    ),
    "test_a_batch_is_claimed_at_once_and_a_retry_inside_it_runs_again": (
        "a Celery worker runs one task per message: there is no batch to claim at once"
    ),
    "test_storm_one_effect_per_key_with_kills": (
        "Celery's storm is its own worker processes: one business task sent three times to "
        "two workers, one of them killed mid-task "
        "(test_a_pool_process_killed_mid_task_gives_its_message_back, "
        "test_three_sends_while_the_first_transaction_is_open_one_effect)"
    ),
    "test_killed_at_a_crash_point": (
        "Celery's crash points are its pool process killed before and after the commit "
        "(test_a_pool_process_killed_at_a_crash_point)"
    ),
}


@pytest.fixture
def postgres() -> Iterator[Tables]:
    need("postgresql")
    need("redis")
    with tables(POSTGRES_URL) as made:
        yield made


@pytest.fixture
def databases(service: str, url: str) -> Iterator[Tables]:
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


def killed_at(
    workers: Workers, marker: Path, what: str, parked: Callable[[], None] = lambda: None
) -> tuple[Any, int, str]:
    """Send the task to two workers, SIGKILL the pool process once it wrote ``marker``
    (where app.py's mode parks it) and ``parked()`` checked what it left, let the redelivery
    finish; its result, the killed pid and the workers' logs."""
    sent = workers.send(TASK, "1001", 2)
    workers.start("a")
    workers.start("b")
    try:
        wait_for(marker.exists, 60, what)
        parked()
        killed = int(marker.read_text())
        os.kill(killed, signal.SIGKILL)
        (workers.workdir / "killed").write_text("")
        # The killed delivery never finished; its redelivery does.
        wait_for(lambda: len(workers.lines("finished")) == 1, 60, "the redelivery to finish")
        result = sent.get(timeout=60)
    finally:
        workers.stop()
    output = workers.logs()
    assert "WorkerLostError" in output, output  # the kill was seen, and its message given back
    return result, killed, output


class DownAtFirst(FlakyStore):
    """A memory store down for its first claim, up from then on."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True

    def claim(self, req: ClaimRequest) -> Claim:
        try:
            return super().claim(req)
        finally:
            self.down = False


class TestCelery(BrokerSuite):
    @pytest.fixture
    def broker(self, request: pytest.FixtureRequest) -> None:
        pytest.skip(NOT_ON_CELERY[request.function.__name__])

    # -- consume and duplicates ----------------------------------------------------------

    def test_a_second_send_returns_the_first_result_without_running(self, app: Any) -> None:
        runs: list[tuple[str, int]] = []
        guard = Guard(MemoryStore())

        @idempotent_task(app, lambda: guard, "stock", key="order:{order_id}")
        def deduct(order_id: str, quantity: int) -> dict[str, Any]:
            runs.append((order_id, quantity))
            return {"order": order_id, "deducted": quantity}

        first = deduct.delay("1001", 2).get()
        second = deduct.delay("1001", 2).get()  # a new task id, the same business key
        other = deduct.delay("1002", 1).get()
        assert runs == [("1001", 2), ("1002", 1)]
        assert first == second == {"order": "1001", "deducted": 2}
        assert other == {"order": "1002", "deducted": 1}

    def test_a_send_is_checked_against_the_arguments(self, app: Any) -> None:
        runs: list[str] = []

        @idempotent_task(app, Guard(MemoryStore()), "stock", key="order:{order_id}")
        def deduct(order_id: str, quantity: int) -> None:
            runs.append(order_id)

        with pytest.raises(TypeError, match="quantity"):
            deduct.delay("1001")
        with pytest.raises(TypeError, match="unexpected keyword argument 'qty'"):
            deduct.delay("1001", qty=2)
        assert runs == []

        @idempotent_task(app, Guard(MemoryStore()), "tasks", key="task:{task}")
        def handle(task: str, attempt: int = 0) -> str:  # a business argument named "task"
            return f"{task}/{attempt}"

        assert handle.delay("t1", attempt=2).get() == "t1/2"
        assert handle.delay(task="t1").get() == "t1/2"

    # -- retry, store outage ---------------------------------------------------------------

    @pytest.mark.slow
    def test_a_body_error_rolls_back_its_write_and_celery_retries_it(
        self, broker_names: BrokerNames, postgres: Tables, tmp_path: Path
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

    def test_a_store_that_is_down_fails_the_task_unrun_and_a_retry_runs_it_once(
        self, app: Any
    ) -> None:
        """Never run unguarded, never reported done: the store's error is the task's, and
        Celery's autoretry_for runs it again once the store answers."""
        runs: list[str] = []

        @idempotent_task(app, Guard(DownAtFirst()), "stock", key="order:{order_id}")
        def deduct(order_id: str) -> str:
            runs.append(order_id)
            return "deducted"

        with pytest.raises(StoreUnavailableError):
            deduct.delay("1001").get()
        assert runs == []

        @idempotent_task(
            app,
            Guard(DownAtFirst()),
            "stock",
            key="order:{order_id}",
            autoretry_for=(StoreUnavailableError,),
            max_retries=3,
            default_retry_delay=0,
        )
        def retried(order_id: str) -> str:
            runs.append(order_id)
            return "deducted"

        assert retried.delay("1001").get() == "deducted"
        assert retried.delay("1001").get() == "deducted"
        assert runs == ["1001"]

    # -- the transactional variant ---------------------------------------------------------

    def test_the_write_and_the_record_commit_together_and_a_copy_replays(
        self, app: Any, db: Db
    ) -> None:
        runs: list[str] = []
        engines: list[Engine] = []

        def engine() -> Engine:
            engines.append(db.engine)
            return db.engine

        @idempotent_task(app, lambda: db.guard, "stock", key="order:{order_id}", engine=engine)
        def deduct_stock(conn: Connection, order_id: str, quantity: int) -> dict[str, Any]:
            runs.append(order_id)
            db.insert(conn, f"order:{order_id}")
            return {"order": order_id, "deducted": quantity}

        first = deduct_stock.delay("1001", 2).get()
        copy = deduct_stock.delay("1001", 2).get()  # a new task id, the same business key
        other = deduct_stock.delay("1002", 1).get()
        assert first == copy == {"order": "1001", "deducted": 2}
        assert other == {"order": "1002", "deducted": 1}
        assert runs == ["1001", "1002"]
        assert sorted(db.stock_moves()) == ["order:1001", "order:1002"]
        assert len(engines) == 3  # the factory is asked on every run, as a guard factory is
        record = db.guard.get("stock", "order:1001")
        assert record is not None
        assert record.status is Status.SUCCEEDED

    @pytest.mark.slow
    @on_each_database
    def test_three_sends_while_the_first_transaction_is_open_one_effect(
        self, broker_names: BrokerNames, databases: Tables, tmp_path: Path
    ) -> None:
        db = databases
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

    # -- kills: the storm and the crash points -----------------------------------------------

    @pytest.mark.slow
    def test_a_pool_process_killed_mid_task_gives_its_message_back(
        self, broker_names: BrokerNames, postgres: Tables, tmp_path: Path
    ) -> None:
        """One business task sent three times (three task ids, one key) and the pool process
        running it SIGKILLed mid-task, with ``acks_late`` and ``task_reject_on_worker_lost``.
        The killed delivery comes back; the copies that find the key running elsewhere are
        retried later; the body's effect exists once, and every send gets the one result."""
        db = postgres
        workers = Workers(broker_names, db, tmp_path)
        sent = [workers.send("deduct_stock", "1001", 2) for _ in range(3)]
        workers.start("a")
        workers.start("b")

        def retried() -> bool:
            return "retry: Retry in" in workers.logs()

        try:
            started = tmp_path / "started"
            wait_for(started.exists, 60, "the first run to start")
            # While the first run sits in its body, a copy on the other worker meets it.
            wait_for(retried, 60, "a copy to be retried while the first run holds the key")
            os.kill(int(started.read_text()), signal.SIGKILL)  # the pool process running it
            (tmp_path / "killed").write_text("")
            results = [result.get(timeout=60) for result in sent]
        finally:
            workers.stop()
        output = workers.logs()
        assert results == [{"order": "1001", "deducted": 2}] * 3, output
        assert db.effects_by_key() == {"order:1001": 1}
        # Two runs: the killed one (no effect) and the one that took the key over.
        assert len(workers.lines("runs")) == 2, output
        assert "WorkerLostError" in output  # the kill was seen, and its message given back

    @pytest.mark.slow
    @on_each_database
    @pytest.mark.parametrize("at", ["before_commit", "after_commit"])
    def test_a_pool_process_killed_at_a_crash_point(
        self, broker_names: BrokerNames, databases: Tables, tmp_path: Path, at: str
    ) -> None:
        """Killed inside the open transaction, the redelivery runs the task again: one
        effect, the redelivery's. Killed after the commit, before the ack, the redelivery
        returns the stored result without running."""
        db = databases
        workers = Workers(broker_names, db, tmp_path, MIDENG_CELERY_MODE=f"kill_{at}")
        if at == "before_commit":
            what = "the run to insert its effect and park before the commit"
            result, killed, output = killed_at(workers, tmp_path / "started", what)
            runs = workers.lines("runs")
            assert len(runs) == 2, output  # the killed run and the redelivery's
            # The killed run's insert rolled back with its record; the redelivery's is the one.
            assert db.effect_pids("order:1001") == [int(runs[1])] != [killed]
        else:

            def committed() -> None:  # committed, the message not acked
                assert db.effects_by_key() == {"order:1001": 1}

            what = "the run to commit and park before the ack"
            result, killed, output = killed_at(workers, tmp_path / "committed", what, committed)
            assert "key=order:1001 outcome=replay" in output  # the redelivery found the record
            assert workers.lines("runs") == [str(killed)], output  # it ran once, in the victim
            assert db.effect_pids("order:1001") == [killed]
        assert result == RESULT, output
        assert db.records_by_status() == {"succeeded": 1}
