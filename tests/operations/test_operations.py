"""Operations: steps run at most once per (operation, name, n-th call), a re-run resumes at
the first unfinished step, and the record completes only when the body returns."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from mideng import Guard, Status
from mideng.errors import ConfigurationError
from mideng.operations import step_id, step_key
from mideng.stores.memory import MemoryStore
from tests.backends import Opened
from tests.runner import Runner


class Declined(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class Coupon:
    code: str
    value: int


@dataclasses.dataclass(frozen=True)
class Notify:
    order: str
    amount: int


def _story(
    guard: Guard, scope: str, asynchronous: bool
) -> tuple[Callable[..., Any], dict[str, Any]]:
    """An operation calling mark_paid, issue_coupon twice (two coupons), add_points; the
    points step fails while ``state["fail"]`` is set."""
    state: dict[str, Any] = {"runs": [], "fail": True, "seen": []}

    def body(name: str, order: str) -> Any:
        state["runs"].append(step_id())
        record = guard.get(scope, order)
        state["seen"].append(None if record is None else record.status)
        if name == "add_points" and state["fail"]:
            raise Declined("points service down")
        if name == "issue_coupon":
            return Coupon(step_key()[-6:], 5)
        return f"{name}:{order}"

    if asynchronous:

        @guard.step("mark_paid")
        async def mark_paid(order: str) -> str:
            return body("mark_paid", order)  # type: ignore[no-any-return]

        @guard.step("issue_coupon")
        async def issue_coupon(order: str) -> Coupon:
            return body("issue_coupon", order)  # type: ignore[no-any-return]

        @guard.step("add_points")
        async def add_points(order: str) -> str:
            return body("add_points", order)  # type: ignore[no-any-return]

        @guard.operation(scope, key="{order}")
        async def pay_async(order: str) -> tuple[str, Coupon, Coupon, str]:
            first = await issue_coupon(order)
            paid = await mark_paid(order)
            second = await issue_coupon(order)
            return paid, first, second, await add_points(order)

        return pay_async, state

    @guard.step("mark_paid")
    def mark_paid_sync(order: str) -> str:
        return body("mark_paid", order)  # type: ignore[no-any-return]

    @guard.step("issue_coupon")
    def issue_coupon_sync(order: str) -> Coupon:
        return body("issue_coupon", order)  # type: ignore[no-any-return]

    @guard.step("add_points")
    def add_points_sync(order: str) -> str:
        return body("add_points", order)  # type: ignore[no-any-return]

    @guard.operation(scope, key="{order}")
    def pay(order: str) -> tuple[str, Coupon, Coupon, str]:
        first = issue_coupon_sync(order)
        paid = mark_paid_sync(order)
        second = issue_coupon_sync(order)
        return paid, first, second, add_points_sync(order)

    return pay, state


def test_a_rerun_resumes_at_the_first_unfinished_step(opened: Opened, runner: Runner) -> None:
    guard, scope = Guard(opened.store, lease=30), f"pay-{uuid.uuid4().hex[:6]}"
    op, state = _story(guard, scope, runner.mode == "async")

    def call() -> Any:
        return runner.do(lambda: op("o1"), lambda: op("o1"))

    with pytest.raises(Declined):
        call()
    assert state["runs"] == ["issue_coupon#1", "mark_paid#1", "issue_coupon#2", "add_points#1"]
    # Every step ran while the operation's record was still processing.
    assert state["seen"] == [Status.PROCESSING] * 4
    (item,) = guard.pending(scope)
    assert item.state == "released"
    assert item.steps_done == ["issue_coupon#1", "mark_paid#1", "issue_coupon#2"]
    state["fail"] = False
    done = call()
    assert state["runs"][4:] == ["add_points#1"]  # the finished steps were not run again
    paid, first, second, points = done
    assert (paid, points) == ("mark_paid:o1", "add_points:o1")
    assert isinstance(first, Coupon)  # a replayed step's result is rebuilt to its type
    assert first != second  # each call of a name is its own step, with its own key
    assert call() == done
    assert len(state["runs"]) == 5
    record = guard.get(scope, "o1")
    assert record is not None
    assert record.status is Status.SUCCEEDED
    assert guard.pending(scope) == []


def test_a_step_outside_an_operation_says_so() -> None:
    guard = Guard(MemoryStore())

    @guard.step("send_sms")
    def send_sms(phone: str) -> bool:
        return True

    with pytest.raises(ConfigurationError, match="outside an operation"):
        send_sms("555")
    with pytest.raises(ConfigurationError, match="inside a running step"):
        step_key()


def test_downstream_keys_are_stable_across_runs_and_distinct_per_step() -> None:
    guard = Guard(MemoryStore())
    seen: list[str] = []
    fail = [True]

    @guard.step("charge", key_arg="idempotency_key")
    def charge(amount: int, idempotency_key: str = "") -> int:
        assert idempotency_key == step_key()
        seen.append(idempotency_key)
        if fail[0]:
            fail[0] = False
            raise Declined("timeout")
        return amount

    @guard.operation("checkout", key="{order}")
    def checkout(order: str) -> list[int]:
        return [charge(100), charge(200)]

    with pytest.raises(Declined):
        checkout("o1")
    assert checkout("o1") == [100, 200]
    assert seen[0] == seen[1] != seen[2]  # a retried step keeps its key; the next has its own


def test_reconcile_rebuilds_typed_arguments_and_reports_what_it_cannot_run() -> None:
    store = MemoryStore()
    guard = Guard(store, lease=30)
    got: list[Notify] = []
    fail = [True]

    @guard.step("mark_paid")
    def mark_paid(notify: Notify) -> str:
        got.append(notify)
        if fail[0]:
            raise Declined("db down")
        return notify.order

    @guard.operation("pay_notify", key="{notify.order}", steps=("mark_paid",))
    def pay(notify: Notify) -> str:
        return mark_paid(notify)

    with pytest.raises(Declined):
        pay(Notify("o7", 1250))
    # Another process that never registered pay_notify: reported, not guessed.
    stranger = Guard(store)
    (item,) = stranger.pending()
    assert (item.registered, item.steps_left) == (False, None)
    (report,) = stranger.reconcile(min_age=0)
    assert (report.key, report.outcome) == ("o7", "unregistered")
    fail[0] = False
    # Begun just now: by default its caller's to retry (a consumer's message coming back).
    (young,) = guard.reconcile()
    assert (young.key, young.outcome) == ("o7", "left_to_caller")
    assert young.detail.startswith("released, begun ")
    assert len(got) == 1
    for bad in (float("nan"), float("inf"), -1):
        with pytest.raises(ConfigurationError):
            guard.reconcile(min_age=bad)
    (report,) = guard.reconcile(min_age=0)
    assert (report.key, report.outcome) == ("o7", "finished")
    assert got[-1] == Notify("o7", 1250)
    assert guard.reconcile(min_age=0) == []


def test_bad_setups_fail_before_anything_is_stored() -> None:
    store = MemoryStore()
    guard = Guard(store)

    @guard.operation("export", key="{name}")
    def export(name: str, handle: object) -> None:
        return None

    with pytest.raises(ConfigurationError, match="arguments"):
        export("x", object())
    assert guard.get("export", "x") is None
    with pytest.raises(ConfigurationError, match="fail_open"):
        guard.operation("export2", fail_open=True)
    with pytest.raises(ConfigurationError, match="step name"):
        guard.step("has space")
    with pytest.raises(ConfigurationError, match="takes no"):
        guard.step("s", conn="connection")(lambda conn: None)
