"""An operator's reconcile of one operation (``Guard.reconcile_operation``), on every store and
through both drivers: run again only while it is as seen; a caller or another operator that
came first is an answer, and the operation still runs once."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections import Counter as Tally
from pathlib import Path
from typing import Any

import pytest

from mideng import Guard
from mideng.core.answers import Changed, Done, Gone
from mideng.operations import OperationState, SeenOperation
from mideng.stores.steps import StepStore
from tests.backends import Opened
from tests.helpers.reconciler import reconcile_all
from tests.helpers.together import together
from tests.runner import Runner


class Declined(Exception):
    pass


class Shop:
    """A one-step operation that fails while ``failing`` and counts the runs of its step."""

    def __init__(self, guard: Guard, scope: str) -> None:
        self.failing = True
        self.runs: dict[str, int] = {}
        self.lock = threading.Lock()

        @guard.step("charge")
        def charge(order: str, amount: int) -> str:
            with self.lock:
                self.runs[order] = self.runs.get(order, 0) + 1
            if self.failing:
                raise Declined(order)
            return f"{order}:{amount}"

        @guard.operation(scope, key="{order}", steps=("charge",))
        def pay(order: str, amount: int) -> str:
            return charge(order, amount)

        self.pay = pay

    def failed_once(self, order: str) -> None:
        with pytest.raises(Declined):
            self.pay(order, 5)


def _steps(opened: Opened) -> StepStore:
    assert isinstance(opened.store, StepStore)
    return opened.store


def _reconcile(runner: Runner, guard: Guard, scope: str, key: str, seen: SeenOperation) -> Any:
    return runner.do(
        lambda: guard.areconcile_operation(scope, key, seen),
        lambda: guard.reconcile_operation(scope, key, seen),
    )


def test_reconcile_as_seen_runs_it(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store, lease=30)
    shop = Shop(guard, "rc-pay")
    shop.failed_once("o1")
    (item,) = guard.pending("rc-pay")
    assert item.state is OperationState.RELEASED
    shop.failing = False
    answer = _reconcile(runner, guard, "rc-pay", "o1", item.seen)
    assert isinstance(answer, Done)
    assert (answer.now.key, answer.now.outcome) == ("o1", "finished")
    assert shop.runs["o1"] == 2
    assert guard.pending("rc-pay") == []


def test_reconcile_after_its_caller_finished_it_is_changed(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store, lease=30)
    shop = Shop(guard, "rc-retried")
    shop.failed_once("o1")
    (item,) = guard.pending("rc-retried")
    shop.failing = False
    assert shop.pay("o1", 5) == "o1:5"  # the caller's retry, between the look and the act
    answer = _reconcile(runner, guard, "rc-retried", "o1", item.seen)
    if _steps(opened).operation("rc-retried", "o1") is None:  # the steps cleared: gone
        assert isinstance(answer, Gone)
    else:
        assert isinstance(answer, Changed)
        assert answer.now.state is OperationState.DONE
    assert shop.runs["o1"] == 2


def test_reconcile_at_another_fence_is_changed(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store, lease=30, on_error="retry", max_attempts=5)
    shop = Shop(guard, "rc-fence")
    shop.failed_once("o1")
    (item,) = guard.pending("rc-fence")
    shop.failed_once("o1")  # another failed try since the look: the next fence
    answer = _reconcile(runner, guard, "rc-fence", "o1", item.seen)
    assert isinstance(answer, Changed)
    assert answer.now.seen != item.seen
    assert shop.runs["o1"] == 2


def test_reconcile_of_nothing_is_gone(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store, lease=30)
    Shop(guard, "rc-none")
    seen = SeenOperation(OperationState.RELEASED, None)
    assert isinstance(_reconcile(runner, guard, "rc-none", "nope", seen), Gone)
    assert _steps(opened).operation("rc-none", "nope") is None


def test_threads_reconciling_one_operation_run_it_once(opened: Opened) -> None:
    guard = Guard(opened.store, lease=30, in_progress="raise")
    shop = Shop(guard, "rc-race")
    orders = [f"o{i}" for i in range(6)]
    for order in orders:
        shop.failed_once(order)
    seen = {item.key: item.seen for item in guard.pending("rc-race")}
    shop.failing = False

    def operator(n: int) -> list[str]:
        answers = {o: guard.reconcile_operation("rc-race", o, seen[o]) for o in orders}
        return [o for o, a in answers.items() if isinstance(a, Done)]

    done = together(8, operator)
    assert set(done) == set(orders)
    assert shop.runs == dict.fromkeys(orders, 2)  # the failed try and one reconcile each


@pytest.mark.slow
def test_processes_and_threads_reconcile_each_operation_once(
    shared: Opened, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert shared.url is not None
    guard = Guard(shared.store, lease=30)
    shop = Shop(guard, "rc-procs")
    orders = [f"o{i}" for i in range(20)]
    for order in orders:
        shop.failed_once(order)
    seen = {item.key: (item.state.value, item.seen.fence) for item in guard.pending("rc-procs")}
    runs_file = tmp_path / "runs.log"
    runs_file.touch()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.starmap(
            reconcile_all,
            [(shared.url, shared.options, "rc-procs", seen, 4, str(runs_file))] * 2,
        )
    runs = Tally(runs_file.read_text().split())
    assert runs == dict.fromkeys(orders, 1)
    assert {order for done in results for order in done} == set(orders)
    assert guard.pending("rc-procs") == []
