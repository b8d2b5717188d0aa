"""Steps: the functions an operation calls for its effects, each run at most once.

A step's identity is (operation, step name, n-th call of that name in the run); its result
is recorded under the operation's claim, and a re-run of the operation gets it back without
running the step. The running operation travels in a context variable (``Running``), so steps
need no extra argument; a step called outside an operation raises ConfigurationError.

Inside a running step, ``step_key()`` is its deterministic downstream key, to send to a remote
API as its Idempotency-Key: a step killed after the remote call but before its record is
re-sent with the same key, and the provider dedupes it. ``step_id()`` is the step's identity.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import inspect
import re
import typing
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from mideng.core.callables import is_async
from mideng.core.codec import Codec, get_codec
from mideng.core.keys import fast_binder
from mideng.errors import ConfigurationError, IdempotencyError
from mideng.guard.cancellation import through
from mideng.stores.record_table.transactional import (
    RecordTable,
    astep_transaction,
    step_transaction,
)
from mideng.stores.steps import Finished, StepStore

_NAME = re.compile(r"^[A-Za-z0-9_.:/-]{1,200}$")


@dataclass(slots=True)
class Running:
    """The operation whose body is running in this context."""

    store: StepStore
    scope: str
    key: str
    owner: str
    codec: Codec
    done: dict[str, Finished] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    began: bool = False  # the body ran (its steps were begun): they are cleared once it is done

    def next_id(self, name: str) -> str:
        """The n-th call of ``name`` in this run: its identity across runs."""
        n = self.calls.get(name, 0) + 1
        self.calls[name] = n
        return f"{name}#{n}"


@dataclass(frozen=True, slots=True)
class Current:
    """The step running now (what ``step_key`` reads)."""

    operation: Running
    step: str

    @property
    def key(self) -> str:
        """A deterministic downstream key: the same on every run of this step."""
        raw = "\0".join((self.operation.scope, self.operation.key, self.step))
        return "mideng-" + hashlib.sha256(raw.encode()).hexdigest()[:40]


running_operation: ContextVar[Running | None] = ContextVar("mideng_operation", default=None)
_step: ContextVar[Current | None] = ContextVar("mideng_step", default=None)


def current_step() -> Current | None:
    return _step.get()


def current_operation() -> Running | None:
    return running_operation.get()


def step_key() -> str:
    """The running step's downstream key: the same on every run of this step of this
    operation (scope, key, step name and call number), unique to it."""
    current = current_step()
    if current is None:
        raise ConfigurationError(
            "step_key() is only known inside a running step (a function decorated with "
            "@guard.step, called by a running @guard.operation)"
        )
    return current.key


def step_id() -> str:
    """The running step's identity in its operation: ``name#n`` (the n-th call of name)."""
    current = current_step()
    if current is None:
        raise ConfigurationError("step_id() is only known inside a running step")
    return current.step


def check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(
            f"step name {name!r} must be 1-200 letters, digits or _ . : / - (it names the "
            "step's record)"
        )


def _table(store: StepStore) -> RecordTable:
    table = getattr(store, "record_table", None)
    if not isinstance(table, RecordTable):
        raise ConfigurationError(
            f"a step on the caller's connection needs a SQL store (its records in a table); "
            f"{store!r} keeps them elsewhere"
        )
    return table


def _outside(name: str) -> ConfigurationError:
    return ConfigurationError(
        f"step {name!r} was called outside an operation; call it from a function decorated "
        "with @guard.operation(...), whose claim its result is recorded under"
    )


def step_wrapper(
    name: str, conn: str | None, key_arg: str | None, fn: Callable[..., Any]
) -> Callable[..., Any]:
    signature = inspect.signature(fn)
    binder = fast_binder(signature) if conn is not None else None
    for wanted in (conn, key_arg):
        if wanted is not None and wanted not in signature.parameters:
            raise ConfigurationError(f"step {name!r}: {fn.__qualname__} takes no {wanted!r}")
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:
        hint = None
    hint = None if hint is type(None) else hint

    def enter(kwargs: dict[str, Any]) -> tuple[Running, str, Finished | None]:
        running = running_operation.get()
        if running is None:
            raise _outside(name)
        step_id = running.next_id(name)
        if key_arg is not None:
            kwargs[key_arg] = Current(running, step_id).key
        return running, step_id, running.done.get(step_id)

    def connection(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        assert binder is not None
        assert conn is not None
        return binder(args, kwargs)[conn]

    if is_async(fn):

        @functools.wraps(fn)
        async def async_step(*args: Any, **kwargs: Any) -> Any:
            running, step_id, done = enter(kwargs)
            if done is not None:
                return _replayed(running, done, hint)
            with _current(running, step_id):
                if conn is None:
                    result = await fn(*args, **kwargs)
                    await _arecord(running, _entry(running, step_id, result))
                    return result
                table = _table(running.store)
                async with astep_transaction(connection(args, kwargs), table) as record:
                    result = await fn(*args, **kwargs)
                    await record(*_entry(running, step_id, result))
                return result

        return async_step

    @functools.wraps(fn)
    def sync_step(*args: Any, **kwargs: Any) -> Any:
        running, step_id, done = enter(kwargs)
        if done is not None:
            return _replayed(running, done, hint)
        with _current(running, step_id):
            if conn is None:
                result = fn(*args, **kwargs)
                running.store.record_step(*_entry(running, step_id, result))
                return result
            with step_transaction(connection(args, kwargs), _table(running.store)) as record:
                result = fn(*args, **kwargs)
                record(*_entry(running, step_id, result))
            return result

    return sync_step


@contextlib.contextmanager
def _current(running: Running, step_id: str) -> Iterator[None]:
    """The step that runs now, for ``step_key`` / ``step_id`` inside it."""
    token = _step.set(Current(running, step_id))
    try:
        yield
    finally:
        _step.reset(token)


def _entry(running: Running, step_id: str, result: Any) -> tuple[str, str, str, str, bytes, str]:
    """A finished step as the store records it: under the operation's claim."""
    data = running.codec.encode(result)
    return running.scope, running.key, running.owner, step_id, data, running.codec.name


async def _arecord(running: Running, entry: tuple[str, str, str, str, bytes, str]) -> None:
    """Record a finished step; cancelled meanwhile, record it to the end, then raise."""
    try:
        await running.store.arecord_step(*entry)
    except asyncio.CancelledError:
        # The step's effect has happened: recorded, the operation's re-run resumes after it
        # instead of doing it again (a cancellation is no crash; rule 4 is for those).
        with contextlib.suppress(IdempotencyError):
            await through(lambda: running.store.arecord_step(*entry))
        raise


def _replayed(running: Running, done: Finished, hint: Any) -> Any:
    codec = running.codec if done.codec == running.codec.name else get_codec(done.codec)
    return codec.decode(done.result, hint)
