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
from time import perf_counter
from typing import Any

from mideng.errors import LeaseLostError, StoreUnavailableError
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


def _takeover(req: Any, record: Any) -> bool:
    # An acquired claim over an attempt that never finished: its lease ran out (or an operator
    # settled it as failed). A record reclaimed because its retention ran out counts no
    # attempt as unfinished: it is at least ``ttl`` older than its first claim.
    return record.attempts > 1 and (
        req.ttl is None or record.updated_at - record.created_at < req.ttl
    )


class _Calls:
    """What the wrappers of one store share: the recorder, its label, its open claims.

    Every wrapper reads the clock twice, before and after the store call, and nothing else
    per call: under callgrind a clock read costs about as much as the rest of a wrapper."""

    def __init__(self, rec: Any, label: str) -> None:
        self.rec = rec
        self.label = label
        self.opened: dict[str, float] = {}  # owner -> when its claim was acquired

    def acquired(self, req: Any, claim: Any, ended: float) -> bool:
        opened = self.opened
        if len(opened) >= _OPEN_LIMIT:
            opened.clear()
        opened[req.owner] = ended
        return _takeover(req, claim.record)

    def failed(self, operation: str, scope: str, owner: str, exc: BaseException) -> None:
        begun = self.opened.pop(owner, None) if operation in _SETTLING else None
        if begun is not None:  # the body ran, though what it settled was refused
            self.rec.body(scope, perf_counter() - begun)
        if isinstance(exc, StoreUnavailableError):
            self.rec.store_error(self.label, operation)
        elif isinstance(exc, LeaseLostError):
            self.rec.fenced(scope, operation)


def _claim(calls: _Calls, inner: Callable[..., Any]) -> Callable[..., Any]:
    claimed = calls.rec.claimed

    def claim(store: Any, req: Any) -> Any:
        started = perf_counter()
        try:
            answer = inner(store, req)
        except BaseException as exc:
            calls.failed("claim", req.scope, req.owner, exc)
            raise
        ended = perf_counter()
        outcome: str = answer.outcome._value_  # the member's value slot: no enum descriptor
        takeover = outcome == "acquired" and calls.acquired(req, answer, ended)
        claimed(req.scope, outcome, ended - started, takeover)
        return answer

    return claim


def _aclaim(calls: _Calls, inner: Callable[..., Any]) -> Callable[..., Any]:
    claimed = calls.rec.claimed

    async def aclaim(store: Any, req: Any) -> Any:
        started = perf_counter()
        try:
            answer = await inner(store, req)
        except BaseException as exc:
            calls.failed("claim", req.scope, req.owner, exc)
            raise
        ended = perf_counter()
        outcome: str = answer.outcome._value_
        takeover = outcome == "acquired" and calls.acquired(req, answer, ended)
        claimed(req.scope, outcome, ended - started, takeover)
        return answer

    return aclaim


def _counted_claim(calls: _Calls, inner: Callable[..., Any]) -> Callable[..., Any]:
    """The claim without durations (``metrics.enable(durations=False)``): no clock read."""
    counted = calls.rec.counted

    def claim(store: Any, req: Any) -> Any:
        try:
            answer = inner(store, req)
        except BaseException as exc:
            calls.failed("claim", req.scope, req.owner, exc)
            raise
        outcome: str = answer.outcome._value_
        counted(req.scope, outcome, outcome == "acquired" and _takeover(req, answer.record))
        return answer

    return claim


def _counted_aclaim(calls: _Calls, inner: Callable[..., Any]) -> Callable[..., Any]:
    counted = calls.rec.counted

    async def aclaim(store: Any, req: Any) -> Any:
        try:
            answer = await inner(store, req)
        except BaseException as exc:
            calls.failed("claim", req.scope, req.owner, exc)
            raise
        outcome: str = answer.outcome._value_
        counted(req.scope, outcome, outcome == "acquired" and _takeover(req, answer.record))
        return answer

    return aclaim


def _refused(calls: _Calls, name: str, inner: Callable[..., Any]) -> Callable[..., Any]:
    """A settling or renewing call without durations: only its failures are counted."""

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
    stored, opened = calls.rec.stored, calls.opened
    settles = name in _SETTLING

    def call(store: Any, ticket: Any, *args: Any) -> Any:
        started = perf_counter()
        try:
            answer = inner(store, ticket, *args)
        except BaseException as exc:
            calls.failed(name, ticket.scope, ticket.owner, exc)
            raise
        begun = opened.pop(ticket.owner, None) if settles else None
        stored(ticket.scope, name, perf_counter() - started, begun, started)
        return answer

    return call


def _asettle(calls: _Calls, name: str, inner: Callable[..., Any]) -> Callable[..., Any]:
    stored, opened = calls.rec.stored, calls.opened
    settles = name in _SETTLING

    async def call(store: Any, ticket: Any, *args: Any) -> Any:
        started = perf_counter()
        try:
            answer = await inner(store, ticket, *args)
        except BaseException as exc:
            calls.failed(name, ticket.scope, ticket.owner, exc)
            raise
        begun = opened.pop(ticket.owner, None) if settles else None
        stored(ticket.scope, name, perf_counter() - started, begun, started)
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
    # attributes (and the interpreter's lookups of them) stay exactly as they were.
    metaclass: Any = type(cls)  # ABCMeta for every store
    store.__class__ = metaclass(cls.__name__, (cls,), ns)
