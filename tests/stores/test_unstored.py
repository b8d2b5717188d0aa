"""A task scope (``on_error="retry"``) whose body ran but whose result can't be stored: the
record ends there, on every store and both drivers. Recorded as a failed attempt, it was
retried: the next call, or reconcile, ran the body again, up to ``max_attempts`` times."""

from __future__ import annotations

import threading

import pytest

from mideng import Guard, Status
from mideng.errors import CodecError
from tests.backends import Opened
from tests.runner import Runner
from tests.stores.test_contract import Counter


def test_a_result_the_codec_cannot_store_is_not_run_again(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store, on_error="retry", max_attempts=3)
    runs = Counter()

    def body() -> object:
        runs.bump()
        return threading.Lock()  # no codec stores a lock

    with pytest.raises(CodecError) as first:
        runner.call(guard, "task", "t1", body)
    for _ in range(4):  # more than max_attempts: none of them runs the body
        with pytest.raises(CodecError) as again:
            runner.call(guard, "task", "t1", body)
        assert str(again.value) == str(first.value)
    assert runs.n == 1
    record = guard.get("task", "t1")
    assert record is not None
    assert record.status is Status.SUCCEEDED  # the body returned: it is done, its value lost
    assert record.attempts == 1


def test_a_step_result_the_codec_cannot_store_ends_the_task(opened: Opened, runner: Runner) -> None:
    # A body that raises CodecError (here: a nested guarded call whose result can't be
    # stored) has done what came before it; a retry would do it again.
    guard = Guard(opened.store, on_error="retry", max_attempts=3)
    inner = Guard(opened.store, on_error="record")
    runs = Counter()

    def body() -> str:
        runs.bump()
        inner.run("inner", f"i{runs.n}", threading.Lock)  # runs, then can't be stored
        return "unreached"

    for _ in range(3):
        with pytest.raises(CodecError):
            runner.call(guard, "task", "t2", body)
    assert runs.n == 1
