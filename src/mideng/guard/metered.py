"""The Guard's loops while metrics are on: they count their own store calls.

Metrics wrap a store's operations on the instance (mideng.observability.instrument), one
wrapper frame per store call (a coroutine, on the async side). Most guarded calls are one
claim and, for a first call, one settling call, and a wrapper is about as dear as the
counting it does (docs/benchmarks.md), so while metrics are on ``Guard.drive`` and
``Guard.adrive`` are this module's ``drive`` and ``adrive``: the plain loops' first claim and
settling, calling the store's own operations and counting what the wrappers would, from
clock reads they share (a claim's end is the body's start). They are set on the class, not
per Guard, and only while metrics are on: metrics off, a call runs the plain loop and tests
for nothing. Everything else (a call that waits, after its first claim; heartbeats,
consumers' own store calls, a traced or unobserved store, an embedded store's async
operations, which run its wrapped sync ones) goes through the wrappers.

The two loops are the plain loops' pair (sync and await), as those are; what they count is
said once, in ``_claimed`` and ``_settled``, which the sync loop's usual path spells inline
(a frame each, 0.5-0.6 thousand instructions of a duplicate's 42 under callgrind). What
they count must equal what the wrappers count for the same calls:
tests/observability/test_metered.py runs the Guard's behaviour both ways, sync and async,
and compares. That test checks answers and counts, not cost: a step the plain loops drop (as
``Guard.adrive`` dropped the completion's settle step) must be dropped here too, or metrics
on cost more than they need (bench/bench_python.py --async --metrics shows it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from time import monotonic
from time import sleep as _sleep
from typing import Any, TypeVar

from mideng.core import effects
from mideng.core.flow import RAISE, RETURN, RUN, Call
from mideng.core.record import Claim, Ticket
from mideng.core.settle import Settle, completion, raised, returned, unencodable
from mideng.errors import CodecError, IdempotencyError
from mideng.guard.aheartbeat import renew_store
from mideng.guard.cancelled import give_back
from mideng.guard.guard import Guard, _no_heartbeat
from mideng.guard.settling import asettle, made_again, to_its_end, written
from mideng.guard.store_errors import store_error
from mideng.observability import instrument, logs, watch
from mideng.observability.recorder import takes_over

R = TypeVar("R")
_plain_drive = Guard.drive
_plain_adrive = Guard.adrive
# What a claim's end is read from: the clock, or (no durations) a C callable answering 0.0;
# one global call either way, not a test of the recorder's setting per claim. Without
# durations the claims' series are untimed: what a claim appends is only counted.
_no_clock: Callable[[], float] = float
_clock: Callable[[], float] = monotonic


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
    # ``_claimed``, inline (a duplicate's frame less). Counted before ``Call.next``, which
    # can raise (a result that no longer decodes), as the claim's wrapper counts it before
    # the loop sees the claim.
    try:
        by_scope = meter.scopes[call.scope]
        pending = by_scope[claim.outcome]
    except KeyError:
        by_scope, pending = meter.scope_pending(call.scope, claim.outcome)
    pending.append(ended - call.started)
    if len(pending) >= 4096:  # recorder.FOLD_AT
        meter.rec.fold()
    action = call.next(claim)
    if action is RUN:  # acquired (a take-over is counted after the claim it counts)
        record = claim.record
        if record.attempts > 1 and takes_over(call, record):
            meter.rec.takeover(call.scope)
        if not ended:  # no durations: the settling call's wrapper counts its failures
            return self._execute(call, fn, args, kwargs)
        return _execute(self, meter, by_scope, call, fn, args, kwargs, ended)
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


async def _plain_aexecute(
    self: Guard,
    call: Call,
    fn: Callable[..., Awaitable[R]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> R:
    """What the plain ``Guard.adrive`` does with an acquired call (it spells it inline)."""
    p, ticket = call.policy, call.ticket
    stop = renew_store(p.lease, self.store, ticket, p.ttl) if p.heartbeat else _no_heartbeat
    try:
        result = await fn(*args, **kwargs)
    except BaseException as exc:
        stop()
        await asettle(self.store, call, ticket, raised(p, exc))
        raise
    stop()
    step = returned(p, result)
    await asettle(self.store, call, ticket, step)
    if step.error is not None:
        raise step.error
    return result


async def adrive(  # noqa: PLR0915 (one frame, as the module's docstring says)
    self: Guard,
    call: Call,
    fn: Callable[..., Awaitable[R]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> R:
    store: Any = self.store
    try:
        meter = store._mideng_meter
    except AttributeError:
        return await _plain_adrive(self, call, fn, args, kwargs)
    claim_of = meter.aclaim  # None: an embedded store's, which runs its wrapped sync claim
    if claim_of is None or watch.on is not None:
        return await _plain_adrive(self, call, fn, args, kwargs)
    try:
        claim = await claim_of(store, call)
    except IdempotencyError as exc:
        meter.refused("claim", call.scope, exc)
        if not store_error(call, None, exc):
            raise
        return await fn(*args, **kwargs)
    except asyncio.CancelledError:  # as in Guard.adrive: it may have landed
        await give_back(store, call)
        raise
    ended = _clock()
    by_scope = _claimed(meter, call, claim, ended)
    action = call.next(claim)
    if action is RUN:
        record = claim.record
        if record.attempts > 1 and takes_over(call, record):
            meter.rec.takeover(call.scope)
        if not ended:
            return await _plain_aexecute(self, call, fn, args, kwargs)
        # The acquired call's body and settling spelt here, as the plain Guard.adrive spells
        # them: an awaited frame less on every async first call while metrics are on.
        p, ticket = call.policy, call.ticket
        stop = renew_store(p.lease, store, ticket, p.ttl) if p.heartbeat else _no_heartbeat
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            stop()
            await _asettle(self, meter, by_scope, call, ticket, raised(p, exc), ended)
            raise
        stop()
        # returned(p, result) and _asettle spelt for a result the codec encodes: no step
        # made, no operation looked up by name.
        codec = p.codec
        try:
            data = codec.encode(result)
        except CodecError as exc:
            step = unencodable(p, exc, result)
            await _asettle(self, meter, by_scope, call, ticket, step, ended)
            if step.error is exc:
                raise
            raise (step.error or exc) from exc  # work that never ran: released
        begun = monotonic()
        try:
            await meter.acomplete(store, ticket, data, codec.name, p.ttl)
        except IdempotencyError as exc:
            step = completion(p, data)
            left = await effects.arun(made_again(store, call, ticket, step, exc))
            _stands(meter, call, ticket, step, ended, exc, left)
            return result
        except asyncio.CancelledError:  # as in Guard.adrive: the body ran
            step = completion(p, data)
            await effects.arun(to_its_end(call, written(store, ticket, step.write)))
            raise
        _settled(meter, by_scope, "complete", ticket.scope, begun, ended)
        return result
    logs.duplicate(call)
    if action is RETURN:
        return call.value  # type: ignore[no-any-return]
    if action is RAISE:
        raise call.error
    await asyncio.sleep(call.delay)
    return await _plain_adrive(self, call, fn, args, kwargs)


def _claimed(meter: Any, call: Call, claim: Claim, ended: float) -> dict[Any, Any]:
    """Count a loop's first claim, answered at ``ended`` (0.0 without durations) and timed
    from the call's start; the scope's pending lists, for its settling."""
    try:
        by_scope: dict[Any, Any] = meter.scopes[call.scope]
        pending = by_scope[claim.outcome]
    except KeyError:
        by_scope, pending = meter.scope_pending(call.scope, claim.outcome)
    pending.append(ended - call.started)
    if len(pending) >= 4096:
        meter.rec.fold()
    return by_scope


def _settled(
    meter: Any, by_scope: dict[Any, Any], name: str, scope: str, begun: float, acquired: float
) -> None:
    """Count a settling call ``name`` that began at ``begun`` and answered now, and the body
    before it, from its claim acquired at ``acquired``. No fold check: a loop appends here
    once per acquired claim it counted, and that claim's append folds every series once
    4096 wait (the wrappers check their own)."""
    ended = monotonic()
    try:
        pending, body = by_scope[name]
    except KeyError:
        pending, body = meter.settle_pending(name, scope)
    pending.append(ended - begun)
    body.append(begun - acquired)


def _unsettled(
    meter: Any, call: Call, ticket: Ticket, step: Settle, acquired: float, exc: IdempotencyError
) -> bool:
    """A settling call that raised: the body ran, timed to now (as the wrapper times it), and
    the error counted; whether the call goes on (``store_error``)."""
    name = step.operation
    meter.settle_pending(name, ticket.scope)[1].append(monotonic() - acquired)
    meter.refused(name, ticket.scope, exc)
    return store_error(call, step, exc)


def _stands(
    meter: Any,
    call: Call,
    ticket: Ticket,
    step: Settle,
    acquired: float,
    exc: IdempotencyError,
    left: IdempotencyError | None,
) -> None:
    """After a settling write the store failed with ``exc`` and that was made again
    (``guard.settling``): ``left``, the error that stands (None: made), is counted and raised
    unless the call goes on with it."""
    if left is not None and not _unsettled(meter, call, ticket, step, acquired, left):
        if left is exc:
            raise exc
        raise left from exc


def _execute(
    self: Guard,
    meter: Any,
    by_scope: dict[Any, Any],
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
        _settle(self, meter, by_scope, call, ticket, raised(p, exc), acquired)
        raise
    stop()
    step = returned(p, result)
    # ``_settle`` and ``_settled``, inline: a first call's two frames less. The failure
    # branch is shared; tests/observability/test_metered.py settles every way, each with
    # every store error.
    name = step.operation
    begun = monotonic()  # also the body's end
    try:
        getattr(meter, name)(self.store, ticket, *step.write)
    except IdempotencyError as exc:
        left = effects.run(made_again(self.store, call, ticket, step, exc))
        _stands(meter, call, ticket, step, acquired, exc, left)
    else:
        ended = monotonic()
        try:
            pending, body = by_scope[name]
        except KeyError:
            pending, body = meter.settle_pending(name, ticket.scope)
        pending.append(ended - begun)
        body.append(begun - acquired)
    if step.error is not None:
        raise step.error
    return result


def _settle(
    self: Guard,
    meter: Any,
    by_scope: dict[Any, Any],
    call: Call,
    ticket: Ticket,
    step: Settle,
    acquired: float,
) -> None:
    begun = monotonic()
    try:
        getattr(meter, step.operation)(self.store, ticket, *step.write)
    except IdempotencyError as exc:
        left = effects.run(made_again(self.store, call, ticket, step, exc))
        _stands(meter, call, ticket, step, acquired, exc, left)
        return
    _settled(meter, by_scope, step.operation, ticket.scope, begun, acquired)


async def _asettle(
    self: Guard,
    meter: Any,
    by_scope: dict[Any, Any],
    call: Call,
    ticket: Ticket,
    step: Settle,
    acquired: float,
) -> None:
    begun = monotonic()
    try:
        await getattr(meter, "a" + step.operation)(self.store, ticket, *step.write)
    except IdempotencyError as exc:
        left = await effects.arun(made_again(self.store, call, ticket, step, exc))
        _stands(meter, call, ticket, step, acquired, exc, left)
        return
    except asyncio.CancelledError:  # as in Guard.adrive: done to its end, then raised
        await effects.arun(to_its_end(call, written(self.store, ticket, step.write)))
        raise
    _settled(meter, by_scope, step.operation, ticket.scope, begun, acquired)


def install(recorder: Any) -> None:
    """The Guard's loops count their own store calls (``metrics.enable`` calls this)."""
    global _clock
    _clock = monotonic if recorder.durations else _no_clock
    Guard.drive = drive  # type: ignore[method-assign]
    Guard.adrive = adrive  # type: ignore[method-assign]


def remove() -> None:
    """The plain loops again (``metrics.disable``); the store wrappers count every call."""
    Guard.drive = _plain_drive  # type: ignore[method-assign]
    Guard.adrive = _plain_adrive  # type: ignore[method-assign]


instrument.loops(install, remove)
