"""Metrics without a hook on the call path: while metrics are on, every store a Guard uses
has its class swapped for a subclass whose record operations are timed and counted.

A Guard calls ``self.store.claim(...)``; while metrics are off the store is of its own class
and a call pays nothing at all, and while they are on it pays one wrapper per store call.
``track`` is how a store becomes known (the Guard calls it once, when it is made);
``instrument`` / ``restore`` swap the classes in and back.

The body's duration is the time between a claim acquired and the call settling it
(complete, fail or release, keyed by the claim's owner, which is minted per call): the body
and the encoding of its result.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from time import monotonic
from typing import Any

from mideng.errors import LeaseLostError, StoreUnavailableError
from mideng.observability.recorder import Recorder, takes_over
from mideng.observability.watch import store_label

_BASE = "__mideng_unobserved__"  # on an instrumented class: the store's own class
OPERATIONS = ("claim", "complete", "fail", "release", "heartbeat")
_SETTLING = ("complete", "fail", "release")
_OPEN_LIMIT = 65536  # claims remembered for the body's duration; a never-settled one is dropped

_stores: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()
_recorder: Any = None


def track(store: Any) -> None:
    """Know ``store`` (a Guard's, when the Guard is made) and instrument it if metrics are on."""
    try:
        with _lock:
            _stores.add(store)
            if _recorder is not None:
                _wrap(store, _recorder)
    except TypeError:  # not weak-referenceable: a test double; left unobserved
        pass


def instrument(recorder: Any) -> None:
    global _recorder
    with _lock:
        _recorder = recorder
        for store in list(_stores):
            _restore(store)
            _wrap(store, recorder)


def restore() -> None:
    global _recorder
    with _lock:
        _recorder = None
        for store in list(_stores):
            _restore(store)


def _restore(store: Any) -> None:
    base = vars(type(store)).get(_BASE)
    if base is not None:
        store.__class__ = base


class _Calls:
    """What the wrappers of one store share: the recorder, its label, its open claims, and
    the pending lists they append to, looked up by label values in one subscript.

    Under callgrind every bytecode of a wrapper counts and a clock read costs about as much as
    ten of them, so a claim reads the clock once, after the store answered: a Guard's call
    read it just before (``Call.started``, which its first claim is timed from). A settling
    call reads it twice, before (which also ends the body) and after."""

    def __init__(self, rec: Recorder, label: str) -> None:
        self.rec = rec
        self.label = label
        self.opened: dict[str, float] = {}  # owner -> when its claim was acquired
        self.claims: dict[tuple[str, str], list[Any]] = {}  # (scope, outcome) -> pending
        # operation -> scope -> (the operation's pending durations, the body's)
        self.stores: dict[str, dict[str, tuple[list[Any], list[Any]]]] = {
            op: {} for op in OPERATIONS
        }

    def claim_pending(self, scope: str, outcome: str) -> list[Any]:
        found = self.rec.get("mideng_claims", (scope, outcome), timed=True).pending
        return self.claims.setdefault((scope, outcome), found)

    def settle_pending(self, operation: str, scope: str) -> tuple[list[Any], list[Any]]:
        pair = (
            self.rec.get("mideng_store_call_seconds", (scope, operation), timed=True).pending,
            self.rec.get("mideng_body_seconds", (scope,), timed=True).pending,
        )
        return self.stores[operation].setdefault(scope, pair)

    def failed(self, operation: str, scope: str, owner: str, exc: BaseException) -> None:
        begun = self.opened.pop(owner, None) if operation in _SETTLING else None
        if begun is not None and self.rec.durations:  # the body ran, though its settling failed
            self.settle_pending(operation, scope)[1].append(monotonic() - begun)
        if isinstance(exc, StoreUnavailableError):
            self.rec.store_error(self.label, operation)
        elif isinstance(exc, LeaseLostError):
            self.rec.fenced(scope, operation)


def _claim(calls: _Calls, inner: Callable[..., Any]) -> Callable[..., Any]:
    claims, fold, opened = calls.claims, calls.rec.fold, calls.opened

    def claim(store: Any, req: Any) -> Any:
        try:  # a Guard's first claim is timed from the call's start, read just before it
            started = req.started if not req.polls else monotonic()
        except AttributeError:  # a plain ClaimRequest, not a Guard's call
            started = monotonic()
        try:
            answer = inner(store, req)
        except BaseException as exc:
            calls.failed("claim", req.scope, req.owner, exc)
            raise
        ended = monotonic()
        outcome: str = answer.outcome._value_  # the member's value slot: no enum descriptor
        if outcome == "acquired":  # Calls.acquired, inline: a first call pays no extra frame
            if len(opened) >= _OPEN_LIMIT:
                opened.clear()
            opened[req.owner] = ended
            if answer.record.attempts > 1 and takes_over(req, answer.record):
                calls.rec.takeover(req.scope)
        try:
            pending = claims[req.scope, outcome]
        except KeyError:
            pending = calls.claim_pending(req.scope, outcome)
        pending.append(ended - started)
        if len(pending) >= 4096:  # recorder.FOLD_AT, a constant here: no global to load
            fold()
        return answer

    return claim


def _aclaim(calls: _Calls, inner: Callable[..., Any]) -> Callable[..., Any]:
    claims, fold, opened = calls.claims, calls.rec.fold, calls.opened

    async def aclaim(store: Any, req: Any) -> Any:
        try:
            started = req.started if not req.polls else monotonic()
        except AttributeError:
            started = monotonic()
        try:
            answer = await inner(store, req)
        except BaseException as exc:
            calls.failed("claim", req.scope, req.owner, exc)
            raise
        ended = monotonic()
        outcome: str = answer.outcome._value_
        if outcome == "acquired":
            if len(opened) >= _OPEN_LIMIT:
                opened.clear()
            opened[req.owner] = ended
            if answer.record.attempts > 1 and takes_over(req, answer.record):
                calls.rec.takeover(req.scope)
        try:
            pending = claims[req.scope, outcome]
        except KeyError:
            pending = calls.claim_pending(req.scope, outcome)
        pending.append(ended - started)
        if len(pending) >= 4096:
            fold()
        return answer

    return aclaim


def _counted_claim(calls: _Calls, inner: Callable[..., Any]) -> Callable[..., Any]:
    """The claim without durations (``metrics.enable(durations=False)``): no clock read."""
    claims, fold = calls.claims, calls.rec.fold

    def claim(store: Any, req: Any) -> Any:
        try:
            answer = inner(store, req)
        except BaseException as exc:
            calls.failed("claim", req.scope, req.owner, exc)
            raise
        outcome: str = answer.outcome._value_
        # No body is timed without durations, so an acquired claim is not noted as opened.
        record = answer.record
        if outcome == "acquired" and record.attempts > 1 and takes_over(req, record):
            calls.rec.takeover(req.scope)
        try:
            pending = claims[req.scope, outcome]
        except KeyError:
            pending = calls.claim_pending(req.scope, outcome)
        pending.append(None)
        if len(pending) >= 4096:
            fold()
        return answer

    return claim


def _counted_aclaim(calls: _Calls, inner: Callable[..., Any]) -> Callable[..., Any]:
    claims, fold = calls.claims, calls.rec.fold

    async def aclaim(store: Any, req: Any) -> Any:
        try:
            answer = await inner(store, req)
        except BaseException as exc:
            calls.failed("claim", req.scope, req.owner, exc)
            raise
        outcome: str = answer.outcome._value_
        # No body is timed without durations, so an acquired claim is not noted as opened.
        record = answer.record
        if outcome == "acquired" and record.attempts > 1 and takes_over(req, record):
            calls.rec.takeover(req.scope)
        try:
            pending = claims[req.scope, outcome]
        except KeyError:
            pending = calls.claim_pending(req.scope, outcome)
        pending.append(None)
        if len(pending) >= 4096:
            fold()
        return answer

    return aclaim


def _refused(calls: _Calls, name: str, inner: Callable[..., Any]) -> Callable[..., Any]:
    """A settling or renewing call without durations: only its failures are counted (its
    claim is in ``opened`` only when it took over, to count that)."""

    def call(store: Any, ticket: Any, *args: Any) -> Any:
        try:
            return inner(store, ticket, *args)
        except BaseException as exc:
            calls.failed(name, ticket.scope, ticket.owner, exc)
            raise

    return call


def _arefused(calls: _Calls, name: str, inner: Callable[..., Any]) -> Callable[..., Any]:
    async def call(store: Any, ticket: Any, *args: Any) -> Any:
        try:
            return await inner(store, ticket, *args)
        except BaseException as exc:
            calls.failed(name, ticket.scope, ticket.owner, exc)
            raise

    return call


def _settle(calls: _Calls, name: str, inner: Callable[..., Any]) -> Callable[..., Any]:
    by_scope, opened, fold = calls.stores[name], calls.opened, calls.rec.fold
    settles = name in _SETTLING

    def call(store: Any, ticket: Any, *args: Any) -> Any:
        started = monotonic()
        try:
            answer = inner(store, ticket, *args)
        except BaseException as exc:
            calls.failed(name, ticket.scope, ticket.owner, exc)
            raise
        ended = monotonic()
        try:
            pending, body = by_scope[ticket.scope]
        except KeyError:
            pending, body = calls.settle_pending(name, ticket.scope)
        pending.append(ended - started)
        if settles:
            begun = opened.pop(ticket.owner, None)
            if begun is not None:
                body.append(started - begun)
        if len(pending) >= 4096:
            fold()
        return answer

    return call


def _asettle(calls: _Calls, name: str, inner: Callable[..., Any]) -> Callable[..., Any]:
    by_scope, opened, fold = calls.stores[name], calls.opened, calls.rec.fold
    settles = name in _SETTLING

    async def call(store: Any, ticket: Any, *args: Any) -> Any:
        started = monotonic()
        try:
            answer = await inner(store, ticket, *args)
        except BaseException as exc:
            calls.failed(name, ticket.scope, ticket.owner, exc)
            raise
        ended = monotonic()
        try:
            pending, body = by_scope[ticket.scope]
        except KeyError:
            pending, body = calls.settle_pending(name, ticket.scope)
        pending.append(ended - started)
        if settles:
            begun = opened.pop(ticket.owner, None)
            if begun is not None:
                body.append(started - begun)
        if len(pending) >= 4096:
            fold()
        return answer

    return call


def _wrap(store: Any, rec: Any) -> None:
    cls: Any = type(store)
    if not all(hasattr(cls, name) for name in OPERATIONS):
        return
    calls = _Calls(rec, store_label(store))
    timed = rec.durations
    claim, aclaim = (_claim, _aclaim) if timed else (_counted_claim, _counted_aclaim)
    settle, asettle = (_settle, _asettle) if timed else (_refused, _arefused)
    ns: dict[str, Any] = {
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
        _BASE: cls,
        "claim": claim(calls, cls.claim),
    }
    for name in OPERATIONS[1:]:
        ns[name] = settle(calls, name, getattr(cls, name))
    # An embedded store's async operations run its sync ones (``offload_reason`` says so),
    # which are wrapped already: wrapping both would count each call twice.
    if not getattr(cls, "offload_reason", ""):
        ns["aclaim"] = aclaim(calls, cls.aclaim)
        for name in OPERATIONS[1:]:
            ns["a" + name] = asettle(calls, name, getattr(cls, "a" + name))
    # A subclass swapped in, not attributes set on the instance: the instance's own
    # attributes stay as they were. CPython 3.11 still turns their values into a dict when
    # the class is assigned, so the store's own ``self.…`` reads become dict lookups while
    # metrics are on (about 0.5 thousand instructions a duplicate, docs/benchmarks.md).
    metaclass: Any = type(cls)  # ABCMeta for every store
    store.__class__ = metaclass(cls.__name__, (cls,), ns)
