from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import typing
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

import mideng
from mideng import Guard, configure, idempotent, request_id_scope
from mideng.errors import ConfigurationError, KeyMissingError, PayloadMismatchError
from mideng.guard.default import default_guard
from mideng.stores.memory import MemoryStore
from mideng.stores.sqlite import SQLiteStore


@dataclasses.dataclass(frozen=True)
class Notify:
    trade_no: str
    amount: int


@dataclasses.dataclass(frozen=True)
class Coupon:
    code: str


@pytest.fixture
def guard() -> Iterator[Guard]:
    g = Guard(MemoryStore())
    yield g
    g.close()


def test_sync_decorator_runs_once_per_key_whatever_the_call_shape(guard: Guard) -> None:
    runs: list[str] = []

    @guard.idempotent("pay_notify", key="{notify.trade_no}", payload=lambda notify: notify)
    def handle(notify: Notify, *, channel: str = "web") -> Coupon:
        """Issue the coupon."""
        runs.append(notify.trade_no)
        return Coupon(f"C-{notify.trade_no}")

    n = Notify("T1", 100)
    assert handle(n) == Coupon("C-T1")
    assert handle(notify=n) == Coupon("C-T1")
    assert handle(n, channel="app") == Coupon("C-T1")
    assert isinstance(handle(n), Coupon)
    assert handle(Notify("T2", 5)) == Coupon("C-T2")
    assert runs == ["T1", "T2"]
    with pytest.raises(PayloadMismatchError):
        handle(Notify("T1", 999))
    assert handle.__name__ == "handle"
    assert handle.__doc__ == "Issue the coupon."
    assert str(inspect.signature(handle)) == str(inspect.signature(handle.__wrapped__))  # type: ignore[attr-defined]
    assert typing.get_type_hints(handle)["return"] is Coupon


def test_a_one_argument_key_is_the_same_however_the_call_passes_it(guard: Guard) -> None:
    runs: list[object] = []

    @guard.idempotent("pay_plain", key="{order}")
    def handle(order: object, amount: int = 1) -> int:
        runs.append(order)
        return len(runs)

    # All by position (the decorator's inline path), by keyword, and with the default filled:
    # one key each for "7" and 7 (rendered with format(), as the template does).
    assert handle("7", 1) == handle(order="7", amount=1) == handle("7") == 1
    assert handle(7, 1) == handle(7) == handle(order=7) == 1
    assert guard.get("pay_plain", "7") is not None
    assert handle(Decimal("1.10"), 2) == 2
    assert guard.get("pay_plain", "1.10") is not None
    assert runs == ["7", Decimal("1.10")]


def test_async_decorator(guard: Guard) -> None:
    runs: list[str] = []

    @guard.idempotent("refund", key="{order_id}", in_progress="wait")
    async def refund(order_id: int) -> Coupon:
        runs.append(str(order_id))
        await asyncio.sleep(0)
        return Coupon(str(order_id))

    async def main() -> list[Coupon]:
        return list(await asyncio.gather(*(refund(7) for _ in range(10))))

    assert inspect.iscoroutinefunction(refund)
    results = asyncio.run(main())
    assert runs == ["7"]
    assert {r.code for r in results} == {"7"}


def test_bare_form_and_callable_key(guard: Guard) -> None:
    runs: list[int] = []

    @guard.idempotent
    def add(a: int, b: int) -> int:
        runs.append(a + b)
        return a + b

    assert add(1, 2) == add(1, 2) == 3
    assert add(2, 1) == 3
    assert runs == [3, 3]
    assert add.__mideng_scope__.endswith("add")  # type: ignore[attr-defined]

    @guard.idempotent("ship", key=lambda order, **_: f"order:{order['id']}")
    def ship(order: dict[str, int], carrier: str = "x") -> str:
        runs.append(0)
        return carrier

    assert ship({"id": 1}) == ship({"id": 1}, carrier="y") == "x"
    assert runs == [3, 3, 0]


def test_template_naming_no_argument_fails_at_decoration(guard: Guard) -> None:
    with pytest.raises(KeyMissingError, match="does not take"):

        @guard.idempotent("x", key="{order.id}")
        def f(notify: Notify) -> None: ...


def test_run_refuses_a_coroutine_function(guard: Guard) -> None:
    async def body() -> None: ...

    with pytest.raises(ConfigurationError, match="arun"):
        guard.run("s", "k", body).close()


def test_duplicate_is_logged_with_scope_key_and_request_id(
    guard: Guard, caplog: pytest.LogCaptureFixture
) -> None:
    with request_id_scope("req-first"):
        guard.run("pay", "T9", lambda: "ok")
    record = guard.get("pay", "T9")
    assert record is not None
    assert record.request_id == "req-first"
    with caplog.at_level(logging.WARNING, logger="mideng"), request_id_scope("req-retry"):
        guard.run("pay", "T9", lambda: "ok")
    [line] = [r for r in caplog.records if r.name == "mideng"]
    assert line.levelno == logging.WARNING
    message = line.getMessage()
    for part in (
        "scope=pay",
        "key=T9",
        "outcome=replay",
        "request_id=req-retry",
        "first_request_id=req-first",
    ):
        assert part in message


@pytest.fixture
def fresh_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MIDENG_STORE", raising=False)
    monkeypatch.setattr(mideng.guard.default, "_default", None)
    yield tmp_path
    if mideng.guard.default._default is not None:
        mideng.guard.default._default.close()


def test_module_level_decorator_uses_embedded_sqlite_by_default(fresh_default: Path) -> None:
    runs: list[int] = []

    @idempotent("points", key="{user}")
    def add_points(user: str) -> int:
        runs.append(1)
        return len(runs)

    assert add_points("u1") == add_points("u1") == 1
    assert isinstance(default_guard().store, SQLiteStore)
    assert (fresh_default / "mideng.db").exists()


def test_configure_and_environment_choose_the_store(
    fresh_default: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    @idempotent("points", key="{user}")
    def add_points(user: str) -> str:
        return user

    monkeypatch.setenv("MIDENG_STORE", "memory://")
    assert add_points("u") == "u"
    assert isinstance(default_guard().store, MemoryStore)
    guard = configure(f"sqlite:///{fresh_default / 'other.db'}", lease=5)
    assert default_guard() is guard
    assert guard.defaults.lease == 5
    assert add_points("u") == "u"
    assert guard.get("points", "u") is not None
