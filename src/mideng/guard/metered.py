"""The Guard's sync loop while metrics are on: it counts its own store calls.

Metrics wrap a store's operations on the instance (mideng.observability.instrument), one
wrapper frame per store call. The sync loop is most guarded calls, and a wrapper is about as
dear as the counting it does (docs/benchmarks.md), so while metrics are on ``Guard.drive`` is
this module's ``drive``: the plain loop's first claim and settling, calling the store's own
operations and counting what the wrappers would, from clock reads it shares (a claim's end is
the body's start). It is set on the class, not per Guard, and only while metrics are on:
metrics off, a call runs the plain loop and tests for nothing. Everything else (a call that
waits, after its first claim; the async loop, heartbeats, consumers, a traced or unobserved
store) goes through the wrappers.

What it counts must equal what the wrappers count for the same calls;
tests/observability/test_metered.py runs the Guard's behaviour both ways and compares.
"""

from __future__ import annotations

from collections.abc import Callable
from time import monotonic
from time import sleep as _sleep
from typing import Any, TypeVar

from mideng.core.flow import RAISE, RETURN, RUN, Call
from mideng.core.record import Ticket
from mideng.core.settle import Settle, raised, returned
from mideng.errors import IdempotencyError
from mideng.guard.guard import Guard, _no_heartbeat
from mideng.guard.store_errors import store_error
from mideng.observability import instrument, logs, watch
from mideng.observability.recorder import takes_over

R = TypeVar("R")
_plain_drive = Guard.drive
# What a claim's end is read from: the clock, or (no durations) a C callable answering None;
# one global call either way, not a test of the recorder's setting per claim.
_no_clock: Callable[[], float | None] = type(None)
_clock: Callable[[], float | None] = monotonic


def drive(
    self: Guard, call: Call, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> R:
    store: Any = self.store
    try:
        meter = store._mideng_meter  # instrument.METER, as an attribute read
    except AttributeError:  # a store metrics don't observe (a test double)
        return _plain_drive(self, call, fn, args, kwargs)
    if watch.on is not None:  # tracing: the plain loop, whose traced store is wrapped
        return _plain_drive(self, call, fn, args, kwargs)
    # ``meter.claim`` is the store's own ``claim``, past its wrapper; read as a value, since
    # CPython 3.11 doesn't specialise ``meter.claim(…)`` on an instance's own attribute.
    claim_of = meter.claim
    try:
        claim = claim_of(store, call)
    except IdempotencyError as exc:
        meter.refused("claim", call.scope, exc)
        if not store_error(call, None, exc):
            raise
        return fn(*args, **kwargs)
    ended = _clock()
    # Counted before ``Call.next``, which can raise (a result that no longer decodes), as the
    # claim's wrapper counts it before the loop sees the claim. Two lookups by str, not one by
    # a tuple made and hashed per call; an Outcome is a str, and finds its value's key.
    try:
        pending = meter.outcomes[call.scope][claim.outcome]
    except KeyError:
        pending = meter.claim_pending(call.scope, claim.outcome._value_)
    pending.append(ended and ended - call.started)  # None without durations
    if len(pending) >= 4096:  # recorder.FOLD_AT
        meter.rec.fold()
    action = call.next(claim)
    if action is RUN:  # acquired (a take-over is counted after the claim it counts)
        record = claim.record
        if record.attempts > 1 and takes_over(call, record):
            meter.rec.takeover(call.scope)
        if ended is None:  # no durations: the settling call's wrapper counts its failures
            return self._execute(call, fn, args, kwargs)
        return _execute(self, meter, call, fn, args, kwargs, ended)
    logs.duplicate(call)
    if action is RETURN:
        return call.value  # type: ignore[no-any-return]
    if action is RAISE:
        raise call.error
    _sleep(call.delay)
    # The polls go round the plain loop: their claims through the store's wrapper, which
    # times a poll from its own start (the call has polled), and an acquired one is settled
    # through the wrapper that knows it. Waiting is the slow path; one claim is the usual.
    return _plain_drive(self, call, fn, args, kwargs)


def _execute(
    self: Guard,
    meter: Any,
    call: Call,
    fn: Callable[..., R],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    acquired: float,
) -> R:
    p, ticket = call.policy, call.ticket
    stop = (
        self._heartbeats.start(
            p.lease, lambda: self.store.heartbeat(ticket, p.lease, p.ttl), ticket
        )
        if p.heartbeat
        else _no_heartbeat
    )
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        stop()
        _settle(self, meter, call, ticket, raised(p, exc), acquired)
        raise
    stop()
    step = returned(p, result)
    # ``_settle``, inline: a first call's frame less (0.6 thousand instructions, about 0.7 %).
    # The failure branch is shared; the five lines recording a success are the copy, and
    # tests/observability/test_metered.py settles both ways, each with every store error.
    name = step.op[0]
    begun = monotonic()
    try:
        getattr(meter, name)(self.store, ticket, *step.args)
    except IdempotencyError as exc:
        if not _unsettled(meter, call, ticket, step, acquired, exc):
            raise
    else:
        ended = monotonic()
        try:
            pending, body = meter.stores[name][ticket.scope]
        except KeyError:
            pending, body = meter.settle_pending(name, ticket.scope)
        pending.append(ended - begun)
        body.append(begun - acquired)
    if step.error is not None:
        raise step.error
    return result


def _settle(
    self: Guard, meter: Any, call: Call, ticket: Ticket, step: Settle, acquired: float
) -> None:
    name = step.op[0]
    begun = monotonic()  # also the body's end
    try:
        getattr(meter, name)(self.store, ticket, *step.args)
    except IdempotencyError as exc:
        if not _unsettled(meter, call, ticket, step, acquired, exc):
            raise
        return
    ended = monotonic()
    try:
        pending, body = meter.stores[name][ticket.scope]
    except KeyError:
        pending, body = meter.settle_pending(name, ticket.scope)
    pending.append(ended - begun)
    body.append(begun - acquired)
    # No fold check: this loop appends here once per acquired claim it counted, and that
    # claim's append folds every series once 4096 wait (the wrappers check their own).


def _unsettled(
    meter: Any, call: Call, ticket: Ticket, step: Settle, acquired: float, exc: IdempotencyError
) -> bool:
    """A settling call that raised: the body ran, timed to now (as the wrapper times it), and
    the error counted; whether the call goes on (``store_error``)."""
    name = step.op[0]
    meter.settle_pending(name, ticket.scope)[1].append(monotonic() - acquired)
    meter.refused(name, ticket.scope, exc)
    return store_error(call, step, exc)


def install(recorder: Any) -> None:
    """The Guard's sync loop counts its own store calls (``metrics.enable`` calls this)."""
    global _clock
    _clock = monotonic if recorder.durations else _no_clock
    Guard.drive = drive  # type: ignore[method-assign]


def remove() -> None:
    """The plain loop again (``metrics.disable``); the store wrappers count every call."""
    Guard.drive = _plain_drive  # type: ignore[method-assign]


instrument.loops(install, remove)
