"""Task tracking (the async task table): a failure is kept with its error, attempt count and
time, the next call may run again up to max_attempts, then callers are refused until an
operator forgets or resolves the record; a holder that died RUNNING shows in stale()."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mideng import Guard, Status
from mideng.errors import AttemptsExhaustedError, ConfigurationError
from mideng.operations import StaleTask
from tests.backends import Ctx, Opened
from tests.operations.processes import open_backend, until
from tests.runner import Runner
from tests.stores.test_crash import Holder


class SmsGatewayDown(Exception):
    pass


def test_a_task_failing_twice_then_succeeding_runs_three_times(
    opened: Opened, runner: Runner
) -> None:
    guard, scope = Guard(opened.store, lease=30), f"send_sms-{uuid.uuid4().hex[:6]}"
    guard.configure_scope(scope, on_error="retry", max_attempts=3)
    runs: list[int] = []

    def send() -> str:
        runs.append(len(runs) + 1)
        if len(runs) < 3:
            raise SmsGatewayDown(f"attempt {len(runs)}")
        return "sent"

    seen = []
    for attempt in (1, 2):
        before = time.time()
        with pytest.raises(SmsGatewayDown, match=f"attempt {attempt}"):
            runner.call(guard, scope, "order:123456", send)
        record = guard.get(scope, "order:123456")
        assert record is not None
        assert (record.status, record.attempts) == (Status.FAILED, attempt)
        assert record.error is not None
        assert b"SmsGatewayDown" in record.error
        assert record.updated_at >= before - 1  # last_execute_time, on the store's clock
        seen.append(record.attempts)
    assert runner.call(guard, scope, "order:123456", send) == "sent"
    record = guard.get(scope, "order:123456")
    assert record is not None
    assert (record.status, record.attempts) == (Status.SUCCEEDED, 3)
    assert runner.call(guard, scope, "order:123456", send) == "sent"  # SUCCESS: skipped
    assert runs == [1, 2, 3]
    assert seen == [1, 2]


def test_a_task_past_max_attempts_is_refused_until_an_operator_releases_it(
    opened: Opened, runner: Runner
) -> None:
    guard, scope = Guard(opened.store, lease=30), f"send_sms-{uuid.uuid4().hex[:6]}"
    guard.configure_scope(scope, on_error="retry", max_attempts=2)
    runs = []

    def send() -> str:
        runs.append(1)
        raise SmsGatewayDown("still down")

    for _ in range(2):
        with pytest.raises(SmsGatewayDown):
            runner.call(guard, scope, "order:9", send)
    with pytest.raises(AttemptsExhaustedError) as refused:
        runner.call(guard, scope, "order:9", send)
    assert len(runs) == 2
    assert isinstance(refused.value.last_error, SmsGatewayDown)
    assert refused.value.record is not None
    assert refused.value.record.attempts == 2
    assert guard.forget(scope, "order:9")  # the operator releases it: it runs afresh
    assert runner.call(guard, scope, "order:9", lambda: "sent") == "sent"
    for _ in range(2):
        with pytest.raises(SmsGatewayDown):
            runner.call(guard, scope, "order:10", send)
    with pytest.raises(AttemptsExhaustedError):
        runner.call(guard, scope, "order:10", send)
    # Or resolves it: the operator sent the SMS by hand.
    settled = guard.resolve(scope, "order:10", result="sent by hand")
    assert settled.status is Status.SUCCEEDED
    assert runner.call(guard, scope, "order:10", send) == "sent by hand"
    assert len(runs) == 4


def test_max_attempts_must_be_a_positive_int() -> None:
    from mideng.stores.memory import MemoryStore

    with pytest.raises(ConfigurationError, match="max_attempts"):
        Guard(MemoryStore(), on_error="retry", max_attempts=0)


@pytest.fixture(params=["postgresql", "sqlite", "redis"])
def crash_store(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Opened]:
    yield from open_backend(request.param, ctx)


@pytest.mark.slow
def test_a_sigkilled_running_task_shows_in_stale(crash_store: Opened, tmp_path: Path) -> None:
    guard = Guard(crash_store.store, lease=1.0)
    holder = Holder(crash_store, tmp_path / "h", "export_task", "task:42")
    try:
        alerts: list[list[StaleTask]] = []
        # Alive and renewing: stale only past a running-time threshold.
        assert guard.stale(alert=alerts.append) == []
        until(lambda: len(guard.stale(older_than=0.05, scope="export_task")) == 1)
        (long,) = guard.stale(older_than=0.05)
        assert "running for" in long.reason
        holder.kill(signal.SIGKILL)
        holder.proc.wait(10)
        until(lambda: len(guard.stale(alert=alerts.append)) == 1)
        (dead,) = alerts[-1]
        assert (dead.record.scope, dead.record.key) == ("export_task", "task:42")
        assert "stopped renewing" in dead.reason
    finally:
        if holder.proc.poll() is None:
            holder.proc.kill()
            holder.proc.wait(10)
