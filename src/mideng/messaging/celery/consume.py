"""Celery's consuming side: a task that runs once per business key, however often the broker
delivers it.

    @idempotent_task(app, lambda: guard, "stock", key="order:{order_id}")
    def deduct_stock(order_id: str, quantity: int) -> dict[str, int]:
        ...

With ``acks_late=True`` a task message is acked only after the task returned, and with
``task_reject_on_worker_lost=True`` a worker process killed mid-task gives its message back:
the broker delivers it again, to this worker or another. Producers also send the same
business task twice (a retried request, a re-published event). So the body runs under the
guard, keyed on the task's business arguments (not the task id, which a re-send changes): a
delivery whose key already finished returns the stored result without running; one whose key
is still running elsewhere is retried later with ``task.retry`` (the worker's slot is freed,
the message comes back after the holder's lease would run out, capped at ``in_flight_delay``);
a holder that died leaves its lease to run out and the next delivery takes the key over.

With ``engine=`` the body takes a SQLAlchemy connection first and its writes commit in the
transaction that writes the dedup record (mideng.guard.transaction), before the task returns
and so before the ack:

    @idempotent_task(app, guard, "stock", key="order:{order_id}", engine=engine)
    def deduct_stock(conn: Connection, order_id: str, quantity: int) -> dict[str, int]:
        conn.execute(...)

    deduct_stock.delay("1001", 2)           # the business arguments only; the key is over them

A crash before the commit rolls the writes and the record back together, so the redelivery
runs it again; a crash after it, before the ack, leaves both, so the redelivery returns the
stored result without running. A copy sent meanwhile waits on the record's row lock and then
replays (or, once the database's lock wait gives up, is retried like any key in flight). A body
error rolls both back and is the task's error, for Celery's retry options to decide.

Both settings are on by default here (``acks_late``, ``reject_on_worker_lost``); other
``task_options`` go to ``app.task``. ``guard`` is a Guard, or a callable returning one, so each
worker process opens its own store connections after the pool forked; ``engine`` likewise.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any, TypeVar

from mideng.core.callables import is_async, return_hint
from mideng.core.keys import (
    KeySpec,
    check_scope,
    compile_template,
    fast_binder,
    selector,
    template_fields,
)
from mideng.db.dialect import lock_timed_out
from mideng.errors import ConfigurationError, InProgressError, KeyMissingError
from mideng.guard.decorator import build
from mideng.guard.driver import Driver
from mideng.guard.transaction import transaction
from mideng.messaging.verdict import MIN_DELAY
from mideng.stores.registry import require

F = TypeVar("F", bound=Callable[..., Any])
_FIRST = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
# The bound task, first in the signature Celery checks sends against; a name no function
# of the user's takes ("task" may well be a business argument).
_TASK = inspect.Parameter("_mideng_bound_task", inspect.Parameter.POSITIONAL_ONLY)


def idempotent_task(
    app: Any,
    guard: Driver | Callable[[], Driver],
    scope: str,
    *,
    key: KeySpec,
    payload: Callable[..., Any] | None = None,
    engine: Any = None,
    in_flight_delay: float = 5.0,
    policy: dict[str, Any] | None = None,
    **task_options: Any,
) -> Callable[[F], Any]:
    """Register the decorated function as a Celery task of ``app`` guarded per business key.

    ``key``: a template over the task's arguments (``"order:{order_id}"``) or a callable
    taking them by name; ``payload``: the same, fingerprinted (a reused key with other data is
    refused). ``engine``: a SQLAlchemy Engine, or a callable returning one; the body is then
    ``def body(conn, *business_args)`` run in the dedup record's transaction. ``policy``: the
    guard's options for this scope (lease, ttl, on_error ...); the in-progress behaviour is
    always "raise", turned into a retry here. ``in_flight_delay``: the longest a delivery
    whose key is running elsewhere waits before it comes back.
    """
    require("celery", "celery")
    if key is None:
        raise ConfigurationError(
            "idempotent_task needs key=: the business arguments that make two sends the same "
            "task (a hash of every argument would dedupe on incidental ones too)"
        )
    if not in_flight_delay > 0:
        raise ConfigurationError(f"in_flight_delay must be positive seconds: {in_flight_delay!r}")
    options = {**(policy or {}), "in_progress": "raise"}
    resolve: Callable[[], Driver] = guard if callable(guard) else (lambda: guard)
    connect = None if engine is None else _engine_source(engine, guard, options)

    def decorate(fn: F) -> Any:
        if is_async(fn):
            # Celery calls a task body and keeps what it returns: an async body would hand back
            # a coroutine nobody awaits, its work never done while the task counted as run.
            where = "run in the Engine's transaction" if connect is not None else "run by Celery"
            raise ConfigurationError(
                f"{getattr(fn, '__qualname__', fn)!r}: the body is a def {where}; a Celery "
                "task body is sync"
            )
        if connect is None:
            guarded = build(resolve, scope, key, payload, options)(fn)
            arguments = inspect.signature(fn)
        else:
            guarded, arguments = _in_transaction(
                resolve, connect, scope, key, payload, options, in_flight_delay, fn
            )

        def run(task: Any, /, *args: Any, **kwargs: Any) -> Any:
            try:
                return guarded(*args, **kwargs)
            except InProgressError as exc:
                # Held elsewhere: this delivery goes back; one more retry is always allowed,
                # since a holder's lease ends (renewed while it lives, taken over once dead).
                countdown = max(min(exc.retry_after or in_flight_delay, in_flight_delay), MIN_DELAY)
                try:
                    raise task.retry(
                        exc=exc, countdown=countdown, max_retries=task.request.retries + 1
                    ) from exc
                finally:
                    # Celery keeps that max_retries on the task object, which every delivery
                    # of this process shares, and autoretry_for takes it for the next body
                    # error, whichever delivery that is: its limit would be this one's.
                    vars(task).pop("override_max_retries", None)

        # Not functools.wraps: Celery would read fn's signature through __wrapped__ and check
        # the bound task's arguments against it minus its first parameter. The signature it
        # gets instead is the task's own, (task, *what a sender passes), so a send with the
        # wrong arguments is refused at send time as with any Celery task.
        head = [_TASK, *arguments.parameters.values()]
        run.__signature__ = inspect.Signature(head)  # type: ignore[attr-defined]
        run.__name__ = fn.__name__
        run.__qualname__ = fn.__qualname__
        run.__module__ = fn.__module__
        run.__doc__ = fn.__doc__
        # No name of its own: Celery names it as any task (module.function, a script run as
        # __main__ named after the app's main), so a sender running the module as a script
        # and a worker importing it agree on the name.
        settings = {
            "acks_late": True,
            "reject_on_worker_lost": True,
            **task_options,
            "bind": True,
        }
        return app.task(**settings)(run)

    return decorate


# -- engine=: the body's writes and the dedup record in one transaction ----------------------


def _engine_source(engine: Any, guard: Any, options: dict[str, Any]) -> Callable[[], Any]:
    """Refuse what could never run, at decoration; then a function giving this process's
    Engine."""
    if options.get("on_error", "release") != "release":
        raise ConfigurationError(
            "with engine=, a body error rolls the dedup record back with the body's writes, so "
            "there is no failure to record: leave on_error unset and use Celery's retry options"
        )
    if not callable(guard) and getattr(guard.store, "record_table", None) is None:
        raise ConfigurationError(
            "engine= needs a Guard over a SQL or SQLite store: the dedup record is a row of its "
            "record table, written in the body's transaction"
        )
    if callable(engine):  # an Engine is not callable; a factory is, and runs in each process
        return lambda: _sync_engine(engine())
    made = _sync_engine(engine)
    owner = [os.getpid()]

    def this_process() -> Any:
        pid = os.getpid()
        if owner[0] != pid:
            # A pool child forked from the process that made the engine: the pooled
            # connections are the parent's sockets, not this process's to use (two processes
            # on one socket mix their statements). They are dropped here without being closed,
            # which would end them for the parent too; this process opens its own.
            made.dispose(close=False)
            owner[0] = pid
        return made

    return this_process


def _sync_engine(engine: Any) -> Any:
    sqlalchemy = require("sqlalchemy.engine", "postgresql")
    if isinstance(engine, sqlalchemy.Engine):
        return engine
    if hasattr(engine, "sync_engine"):
        raise ConfigurationError(
            "engine= takes a sync SQLAlchemy Engine, not an AsyncEngine: a Celery task body is "
            "sync, and an AsyncEngine's connections belong to the event loop that opened them, "
            "so a loop per task would open (and drop) a connection per task. Create the Engine "
            "with create_engine() and a sync driver (postgresql+psycopg://, mysql+pymysql://)"
        )
    raise ConfigurationError(
        f"engine= takes a SQLAlchemy Engine or a callable returning one, got {type(engine)!r}"
    )


def _in_transaction(
    resolve: Callable[[], Driver],
    connect: Callable[[], Any],
    scope: str,
    key: KeySpec,
    payload: Callable[..., Any] | None,
    options: dict[str, Any],
    in_flight_delay: float,
    fn: Callable[..., Any],
) -> tuple[Callable[..., Any], inspect.Signature]:
    """The body run in the record's transaction, and the arguments a sender passes: fn's
    without the connection."""
    check_scope(scope)  # at import, as the decorator does, not on the first task
    signature = inspect.signature(fn)
    params = list(signature.parameters.values())
    if not params or params[0].kind not in _FIRST:
        raise ConfigurationError(
            f"with engine=, {fn.__qualname__} takes the connection first: "
            f"def {fn.__name__}(conn, order_id, ...)"
        )
    business = signature.replace(parameters=params[1:])
    _check_key(key, business, params[0].name, fn)
    if payload is not None and not callable(payload):
        raise ConfigurationError("payload= must be a callable over the call's arguments")
    binder = fast_binder(business)
    key_of: Callable[[Any], Any]
    if isinstance(key, str):
        key_of = compile_template(key)
    else:
        assert key is not None  # idempotent_task refused it, _check_key anything else
        key_of = selector(key)
    payload_of = selector(payload) if payload is not None else None
    hint = return_hint(fn)

    def body(*args: Any, **kwargs: Any) -> Any:
        guard = resolve()
        arguments = binder(args, kwargs)
        rendered = key_of(arguments)  # the guard's prepare checks it
        data = payload_of(arguments) if payload_of is not None else None
        with connect().connect() as conn:
            in_body = False
            try:
                with transaction(
                    guard, conn, scope, rendered, payload=data, result_type=hint, **options
                ) as tx:
                    if tx.replayed:
                        return tx.result
                    in_body = True
                    result = fn(conn, *args, **kwargs)
                    in_body = False
                    tx.set_result(result)
            except Exception as exc:
                if in_body:
                    raise  # the block rolled back the body's writes and the record together
                # A refused claim, a lost connection, a failed commit: the connection may be
                # left inside a transaction SQLAlchemy no longer tracks, holding the
                # uncommitted record; the next task on it would commit that with its own
                # writes. So it is dropped, never pooled.
                conn.invalidate()
                if lock_timed_out(getattr(exc, "orig", exc)):
                    # The database gave up waiting for the record's row lock: the key's first
                    # transaction is still open, so this copy comes back later.
                    raise InProgressError(
                        f"{scope}:{rendered} is held by an open transaction",
                        retry_after=in_flight_delay,
                    ) from exc
                raise
            except BaseException:
                conn.invalidate()
                raise
        return result

    return body, business


def _check_key(key: KeySpec, business: inspect.Signature, conn: str, fn: Any) -> None:
    """Fail at import time when the key reads the connection or an argument there is not."""
    params = business.parameters
    if callable(key):
        named = inspect.signature(key).parameters
        if conn in named and conn not in params:
            raise KeyMissingError(
                f"key= of {fn.__qualname__} takes {conn!r}, the connection: a key is over the "
                f"task's business arguments ({', '.join(params)})"
            )
        return
    if not isinstance(key, str):
        raise ConfigurationError(f"key= is a template or a callable, got {type(key)!r}")
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    for root in template_fields(key):
        if root not in params:
            what = "the connection" if root == conn else f"not a parameter of {fn.__qualname__}"
            raise KeyMissingError(
                f"key template {key!r} reads {root!r}, {what}: a key is over the task's "
                f"business arguments ({', '.join(params)})"
            )
