"""An operation: a guarded call whose body begins its steps, then runs with them in context.

``@guard.operation(scope, key=...)`` decorates the body, ``@guard.step(name)`` each function it
calls for an effect (mark the order paid, issue a coupon, add points, send an SMS). Inside a
running operation a step runs at most once per (operation, step name, n-th call of that name):
its result is recorded under the operation's claim, and a re-run of the operation (a retry, a
take-over after the lease, ``reconcile``) gets the finished steps' results back without
running them and resumes at the first unfinished one. The operation's own record completes
only when its body returns, and its kept steps are cleared then.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, cast

from mideng.core import effects
from mideng.core.callables import is_async
from mideng.core.effects import Effect, Effects
from mideng.core.flow import Call
from mideng.core.keys import (
    KeySpec,
    check_scope,
    compile_template,
    fast_binder,
    render,
    selector,
)
from mideng.core.policy import Policy
from mideng.errors import CodecError, ConfigurationError
from mideng.guard.driver import Driver
from mideng.observability import logs
from mideng.operations.register import Register, Rerun
from mideng.operations.steps import Running, check_name, running_operation
from mideng.stores.steps import StepStore

F = TypeVar("F", bound=Callable[..., Any])


def operation(
    guard: Driver,
    scope: str,
    key: KeySpec,
    steps: tuple[str, ...] | list[str] | None,
    payload: Callable[..., Any] | None,
    options: dict[str, Any],
) -> Callable[[F], F]:
    """The decorator ``guard.operation`` answers: it makes ``fn`` an operation of ``scope``
    and registers it in ``guard``'s register for reconcile."""
    check_scope(scope)
    if payload is not None and not callable(payload):
        raise ConfigurationError("payload= must be a callable over the call's arguments")
    if guard.policy(scope, **options).fail_open:
        raise ConfigurationError(
            "fail_open can't guard an operation: its steps need the store to record them"
        )
    declared = tuple(steps or ())
    for name in declared:
        check_name(name)

    def decorate(fn: F) -> F:
        wrapper, rerun = _operation(guard, scope, key, payload, options, fn)
        Register.of(guard).add(scope, wrapper, rerun, fn, declared, options)
        return cast(F, wrapper)

    return decorate


def _steps_of(guard: Driver) -> StepStore:
    store = guard.store
    if not isinstance(store, StepStore):
        raise ConfigurationError(
            f"{store!r} keeps no steps; multi-step operations need a store with the steps "
            "capability (every store mideng ships has it)"
        )
    return store


def _key_of(key: KeySpec) -> Callable[[Any], Any]:
    if callable(key):
        return selector(key)
    if isinstance(key, str):
        return compile_template(key)
    return lambda arguments: render(None, arguments)


def _operation(
    guard: Driver,
    scope: str,
    key: KeySpec,
    payload: Callable[..., Any] | None,
    options: dict[str, Any],
    fn: Callable[..., Any],
) -> tuple[Callable[..., Any], Rerun]:
    signature = inspect.signature(fn)
    binder = fast_binder(signature)
    key_of = _key_of(key)
    payload_of = selector(payload) if payload is not None else None

    def start(
        args: tuple[Any, ...], kwargs: dict[str, Any], stored_key: str | None
    ) -> tuple[Any, Running, bytes]:
        arguments = binder(args, kwargs)
        policy: Policy = guard.policy(scope, **options)
        body_payload = payload_of(arguments) if payload_of is not None else None
        # A re-run from the stored arguments keeps the key they were stored under: rebuilt
        # (an int passed where a float is declared comes back a float), they may render
        # another key, a fresh operation whose steps would all run again.
        key_now = key_of(arguments) if stored_key is None else stored_key
        call = guard.prepare(scope, key_now, fn, body_payload, policy)
        try:
            stored = policy.codec.encode(arguments)
        except CodecError as exc:
            raise ConfigurationError(
                f"the arguments of operation {scope} are stored so reconcile can run it again, "
                f"and the {policy.codec.name} codec can't store them: {exc}"
            ) from exc
        running = Running(_steps_of(guard), call.scope, call.key, call.owner, policy.codec)
        return call, running, stored

    def run(stored_key: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Effects[Any]:
        """The operation, under the key its arguments render (or the key it is stored under)."""
        call, running, stored = start(args, kwargs, stored_key)
        result = yield _driven(guard, call, _body(running, stored, fn), args, kwargs)
        if running.began:
            store = running.store
            try:
                yield effects.call(store.clear_steps, store.aclear_steps, call.scope, call.key)
            except Exception as exc:  # the record is complete; reconcile clears these
                _left(running, exc)
        return result

    wrapper: Callable[..., Any]
    rerun: Rerun
    if is_async(fn):

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            return await effects.arun(run(None, args, kwargs))

        async def rerun(
            stored_key: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> Any:
            return await effects.arun(run(stored_key, args, kwargs))

    else:

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return effects.run(run(None, args, kwargs))

        def rerun(stored_key: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return effects.run(run(stored_key, args, kwargs))

    wrapper.__mideng_scope__ = scope  # type: ignore[attr-defined]
    return wrapper, rerun


Body = Callable[[tuple[Any, ...], dict[str, Any]], Effects[Any]]


def _body(running: Running, stored: bytes, fn: Callable[..., Any]) -> Body:
    """The operation's body as the Guard runs it: its steps begun (the finished ones read
    back), then ``fn`` with the running operation in context for its steps."""

    def body(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Effects[Any]:
        running.began = True
        store = running.store
        running.done = yield effects.call(
            store.begin_steps,
            store.abegin_steps,
            running.scope,
            running.key,
            running.owner,
            stored,
            running.codec.name,
        )
        token = running_operation.set(running)
        try:
            return (yield Effect(fn, fn, args, kwargs))  # fn is a def or an async def, as run
        finally:
            running_operation.reset(token)

    return body


def _driven(
    guard: Driver, call: Call, body: Body, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Effect[Any]:
    """The Guard driving ``body`` under ``call``: blocking, or awaited."""

    def blocking() -> Any:
        return guard.drive(call, lambda *a, **kw: effects.run(body(a, kw)), args, kwargs)

    async def awaited() -> Any:
        return await guard.adrive(call, lambda *a, **kw: effects.arun(body(a, kw)), args, kwargs)

    return Effect(blocking, awaited, (), {})


def _left(running: Running, exc: Exception) -> None:
    logs.steps_kept(running.scope, running.key, exc)
