"""Key rules on every store, through both drivers: guarded scopes stay out of the token and
debounce namespaces, text no store can hold is refused before any store call, and any other
Unicode text is a key like every other."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

import pytest

from mideng import Guard, Status
from mideng.core.keys import HIT_PREFIX, TOKEN_PREFIX
from mideng.errors import InvalidKeyError
from mideng.http.debounce import Debouncer
from mideng.stores.base import Store
from mideng.stores.memory import MemoryStore
from mideng.tokens import TokenService
from tests.backends import Opened
from tests.runner import Runner

SURROGATE = "\ud800"  # what a badly decoded header leaves behind


class Spy:
    """The store, noting every public operation asked of it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.store, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def noted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return attr(*args, **kwargs)

        return noted


def spied(opened: Opened) -> tuple[Spy, Store]:
    spy = Spy(opened.store)
    return spy, cast(Store, spy)


def never() -> object:
    raise AssertionError("the body must not run")


# -- reserved namespaces ------------------------------------------------------------------
@pytest.mark.parametrize("prefix", [TOKEN_PREFIX, HIT_PREFIX])
def test_a_guarded_scope_in_a_reserved_namespace_is_refused_before_anything_is_stored(
    opened: Opened, runner: Runner, prefix: str
) -> None:
    spy, store = spied(opened)
    guard = Guard(store)
    with pytest.raises(InvalidKeyError, match=f"starts with '{prefix}'.*reserved"):
        runner.call(guard, prefix + "formX", "order-1", never)
    assert spy.calls == []
    assert opened.store.get(prefix + "formX", "order-1") is None


def test_tokens_and_debounce_of_a_name_leave_its_guarded_records_alone(
    opened: Opened, runner: Runner
) -> None:
    # The reported overwrite: a token issued for ("formX", "order-1") replaced the stored
    # result of the guarded scope "token:formX" (now refused), whose next duplicate then found
    # no result. A guarded scope of the same name as the token scope was always apart.
    guard = Guard(opened.store)
    tokens = TokenService(opened.store, scope="formX")
    debouncer = Debouncer(opened.store, window=30, scope="formX")
    first = runner.call(guard, "formX", "order-1", lambda: {"order": 1})
    for prefix in (TOKEN_PREFIX, HIT_PREFIX):
        with pytest.raises(InvalidKeyError):
            runner.call(guard, prefix + "formX", "order-1", never)
    token = runner.do(lambda: tokens.aissue("order-1"), lambda: tokens.issue("order-1"))
    wait = runner.do(lambda: debouncer.ahit("order-1", "x"), lambda: debouncer.hit("order-1", "x"))
    assert wait is None
    assert runner.call(guard, "formX", "order-1", never) == first
    assert runner.do(
        lambda: tokens.aconsume("order-1", token), lambda: tokens.consume("order-1", token)
    )
    assert not tokens.consume("order-1", token)
    assert debouncer.hit("order-1", "x") is not None
    assert runner.call(guard, "formX", "order-1", never) == first
    record = guard.get("formX", "order-1")
    assert record is not None
    assert (record.status, record.fence) == (Status.SUCCEEDED, 1)


@pytest.mark.parametrize("prefix", [TOKEN_PREFIX, HIT_PREFIX])
def test_entry_primitives_take_any_scope_name(opened: Opened, runner: Runner, prefix: str) -> None:
    # The store puts its own prefix in front, so even a name that starts with one is theirs.
    tokens = TokenService(opened.store, scope=prefix + "form")
    token = runner.do(lambda: tokens.aissue("u1"), lambda: tokens.issue("u1"))
    assert runner.do(lambda: tokens.aconsume("u1", token), lambda: tokens.consume("u1", token))
    debouncer = Debouncer(opened.store, window=30, scope=prefix + "d")
    assert (
        runner.do(lambda: debouncer.ahit("ann", "op"), lambda: debouncer.hit("ann", "op")) is None
    )
    assert debouncer.hit("ann", "op") is not None


def test_every_guarded_entry_point_refuses_a_reserved_scope() -> None:
    guard = Guard(MemoryStore())
    with pytest.raises(InvalidKeyError, match="reserved for anti-resubmit tokens"):
        guard.idempotent("token:formX", key="{order}")
    with pytest.raises(InvalidKeyError, match="reserved for debounce windows"):
        guard.configure_scope("hit:formX", on_error="record")
    for operator in (guard.get, guard.forget):
        with pytest.raises(InvalidKeyError):
            operator("token:formX", "order-1")
    with pytest.raises(InvalidKeyError):
        guard.resolve("token:formX", "order-1", failed=True)


# -- lone surrogates ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("scope", "key"),
    [("pay", "order-" + SURROGATE), ("pay" + SURROGATE, "order-1"), ("支付", "订单" + SURROGATE)],
)
def test_a_lone_surrogate_is_refused_before_any_store_call(
    opened: Opened, runner: Runner, scope: str, key: str
) -> None:
    spy, store = spied(opened)
    guard = Guard(store)
    runs: list[int] = []
    with pytest.raises(InvalidKeyError, match="lone surrogate"):
        runner.call(guard, scope, key, lambda: runs.append(1))
    assert runs == []
    assert spy.calls == []
    runner.call(guard, "pay", "order-1", lambda: runs.append(1))  # the spy does see calls
    assert runs == [1]
    assert spy.calls


def test_the_decorator_refuses_a_rendered_key_with_a_lone_surrogate(
    opened: Opened, runner: Runner
) -> None:
    spy, store = spied(opened)
    guard = Guard(store)
    runs: list[str] = []

    @guard.idempotent("pay", key="order-{order}")
    def pay(order: str) -> str:
        runs.append(order)
        return order

    @guard.idempotent("pay", key=lambda order: order)
    async def apay(order: str) -> str:
        runs.append(order)
        return order

    with pytest.raises(InvalidKeyError, match="lone surrogate"):
        runner.do(lambda: apay(SURROGATE), lambda: pay(SURROGATE))
    with pytest.raises(InvalidKeyError, match="lone surrogate"):
        guard.idempotent("pay" + SURROGATE)
    assert runs == []
    assert spy.calls == []


def test_tokens_and_debounce_refuse_a_lone_surrogate_before_any_store_call(
    opened: Opened, runner: Runner
) -> None:
    spy, store = spied(opened)
    tokens = TokenService(store, scope="form")
    token = TokenService.new_token()
    bad = "u1:" + SURROGATE
    attempts: list[tuple[Callable[[], Any], Callable[[], Any]]] = [
        (lambda: tokens.aissue(bad), lambda: tokens.issue(bad)),
        (lambda: tokens.aconsume(bad, token), lambda: tokens.consume(bad, token)),
        (lambda: tokens.arestore(bad, token), lambda: tokens.restore(bad, token)),
    ]
    debouncer = Debouncer(store, window=30)
    for principal, operation in [(bad, "POST /x"), ("ann", "POST /" + SURROGATE), (bad * 99, "x")]:
        attempts.append(
            (
                functools.partial(debouncer.ahit, principal, operation),
                functools.partial(debouncer.hit, principal, operation),
            )
        )
    for coro_fn, sync_fn in attempts:
        with pytest.raises(InvalidKeyError, match="lone surrogate"):
            runner.do(coro_fn, sync_fn)
    for make in (lambda: TokenService(store, scope=bad), lambda: Debouncer(store, scope=bad)):
        with pytest.raises(InvalidKeyError, match="lone surrogate"):
            make()
    assert spy.calls == []


# -- valid non-ASCII text -----------------------------------------------------------------
def test_non_ascii_scopes_and_keys_are_keys_like_any_other(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store)
    runs: list[str] = []

    def body(name: str) -> Callable[[], str]:
        def run() -> str:
            runs.append(name)
            return name

        return run

    scope, key = "支付", "订单-123-\U0001f600"
    assert runner.call(guard, scope, key, body("first")) == "first"
    assert runner.call(guard, scope, key, body("second")) == "first"
    # Differing only in the last (4-byte) character: another key.
    assert runner.call(guard, scope, "订单-123-\U0001f601", body("other")) == "other"
    assert runner.call(guard, "café", key, body("café")) == "café"
    assert runs == ["first", "other", "café"]
    record = guard.get(scope, key)
    assert record is not None
    assert (record.scope, record.key, record.status) == (scope, key, Status.SUCCEEDED)

    tokens = TokenService(opened.store, scope="表单")
    token = runner.do(
        lambda: tokens.aissue("用户-\U0001f4b3"), lambda: tokens.issue("用户-\U0001f4b3")
    )
    assert not tokens.consume("用户-\U0001f4b4", token)
    assert tokens.consume("用户-\U0001f4b3", token)
    debouncer = Debouncer(opened.store, window=30, scope="防抖")
    assert (
        runner.do(lambda: debouncer.ahit("安", "下单"), lambda: debouncer.hit("安", "下单")) is None
    )
    assert debouncer.hit("安", "下单") is not None
    assert debouncer.hit("安", "退款") is None
