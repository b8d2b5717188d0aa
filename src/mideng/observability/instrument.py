"""Metrics without a hook on the call path: while metrics are on, every store a Guard uses
has its record operations replaced, on the instance, by ones that are timed and counted, and
the Guard's loops are replaced, on its class, by ones that count their own store calls.

A Guard calls ``self.store.claim(...)``; while metrics are off the store is as it was made and
a call pays nothing at all. While they are on, the Guard's loops (mideng.guard.metered,
switched through ``loops``) call the store's own operations and count them themselves, and
every other caller (consumers, heartbeats, a call's polls, a traced store, an embedded store's
async operations) goes through the instance's wrappers, one per store call. ``track`` is
how a store becomes known (the Guard calls it once, when it is made); ``instrument`` /
``restore`` put the wrappers on and take them off.

The body's duration is the time between a claim acquired and the call settling it
(complete, fail or release; through the wrappers keyed by the claim's owner, which is minted
per call): the body and the encoding of its result.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from time import monotonic
from types import MethodType
from typing import Any

from mideng.errors import LeaseLostError, StoreUnavailableError
from mideng.observability.recorder import Recorder, takes_over
from mideng.observability.watch import store_label

METER = "_mideng_meter"  # on an instrumented store: its _Calls, which the metered loop uses
OPERATIONS = ("claim", "complete", "fail", "release", "heartbeat")
_SETTLING = ("complete", "fail", "release")
_OPEN_LIMIT = 65536  # claims remembered for the body's duration; a never-settled one is dropped

_stores: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()
_recorder: Any = None
# (install, remove) pairs: loops that count their own store calls while metrics are on.
_loops: list[tuple[Callable[[Recorder], None], Callable[[], None]]] = []


def loops(install: Callable[[Recorder], None], remove: Callable[[], None]) -> None:
    """Register a loop that counts its own store calls (the Guard's, which observability
    can't import): ``install(recorder)`` runs whenever metrics turn on (now, if they are),
    ``remove`` when they turn off."""
    with _lock:
        _loops.append((install, remove))
        if _recorder is not None:
            install(_recorder)


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
        for install, _remove in _loops:
            install(recorder)


def restore() -> None:
    global _recorder
    with _lock:
        _recorder = None
        for store in list(_stores):
            _restore(store)
        for _install, remove in _loops:
            remove()


def _restore(store: Any) -> None:
    calls = getattr(store, METER, None)
    if isinstance(calls, _Calls):
        for name in (*calls.wrapped, METER):
            delattr(store, name)  # the instance's own: the class's operations show again


class _Calls:
    """What the wrappers of one store share: the recorder, its label, its open claims, and
    the pending lists they append to, looked up by label values in one subscript.

    Under callgrind every bytecode of a wrapper counts and a clock read costs about as much as
    ten of them, so a claim reads the clock once, after the store answered: a Guard's call
    read it just before (``Call.started``, which its first claim is timed from). A settling
    call reads it twice, before (which also ends the body) and after."""

    def __init__(self, rec: Recorder, label: str, cls: Any) -> None:
        self.rec = rec
        self.label = label
        # The store's own operations, for the metered loops (they count them themselves);
        # the async ones None where they run the sync ones (``_wrap``): the async loop then
        # leaves them to the wrappers.
        self.claim, self.complete, self.fail = cls.claim, cls.complete, cls.fail
        self.release = cls.release
        native = not getattr(cls, "offload_reason", "")
        self.aclaim = getattr(cls, "aclaim", None) if native else None
        self.acomplete = getattr(cls, "acomplete", None) if native else None
        self.afail = getattr(cls, "afail", None) if native else None
        self.arelease = getattr(cls, "arelease", None) if native else None
        self.wrapped: tuple[str, ...] = ()  # the operations set on the instance
        self.opened: dict[str, float] = {}  # owner -> when its claim was acquired
        self.claims: dict[tuple[str, str], list[Any]] = {}  # (scope, outcome) -> pending
        # operation -> scope -> (the operation's pending durations, the body's)
        self.stores: dict[str, dict[str, tuple[list[Any], list[Any]]]] = {
            op: {} for op in OPERATIONS
        }
        # The metered loops' view of the same lists, one dict per scope: a claim's by its
        # Outcome member (found by identity: an Outcome is a str subclass, which a dict of
        # str keys compares by value, in Python), a settling call's pair by the operation's
        # name. One lookup by scope serves a call's claim and its settling.
        self.scopes: dict[str, dict[Any, Any]] = {}

    def claim_pending(self, scope: str, outcome: str) -> list[Any]:
        found = self.rec.get("mideng_claims", (scope, outcome), timed=True).pending
        return self.claims.setdefault((scope, outcome), found)

    def scope_pending(self, scope: str, outcome: Any) -> tuple[dict[Any, Any], list[Any]]:
        """The metered loops' miss: ``scope``'s dict, and the pending claims of ``outcome``
        (an Outcome member) in it."""
        by_scope = self.scopes.setdefault(scope, {})
        found = self.claim_pending(scope, outcome._value_)
        return by_scope, by_scope.setdefault(outcome, found)

    def settle_pending(self, operation: str, scope: str) -> tuple[list[Any], list[Any]]:
        pair = (
            self.rec.get("mideng_store_call_seconds", (scope, operation), timed=True).pending,
            self.rec.get("mideng_body_seconds", (scope,), timed=True).pending,
        )
        self.scopes.setdefault(scope, {}).setdefault(operation, pair)
        return self.stores[operation].setdefault(scope, pair)

    def failed(self, operation: str, scope: str, owner: str, exc: BaseException) -> None:
        begun = self.opened.pop(owner, None) if operation in _SETTLING else None
        if begun is not None and self.rec.durations:  # the body ran, though its settling failed
            self.settle_pending(operation, scope)[1].append(monotonic() - begun)
        self.refused(operation, scope, exc)

    def refused(self, operation: str, scope: str, exc: BaseException) -> None:
        """A store call that raised: counted as a store error or a fenced write, if it is one."""
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
    calls = _Calls(rec, store_label(store), cls)
    timed = rec.durations
    claim, aclaim = (_claim, _aclaim) if timed else (_counted_claim, _counted_aclaim)
    settle, asettle = (_settle, _asettle) if timed else (_refused, _arefused)
    ops: dict[str, Any] = {"claim": claim(calls, cls.claim)}
    for name in OPERATIONS[1:]:
        ops[name] = settle(calls, name, getattr(cls, name))
    # An embedded store's async operations run its sync ones (``offload_reason`` says so),
    # which are wrapped already: wrapping both would count each call twice.
    if not getattr(cls, "offload_reason", ""):
        ops["aclaim"] = aclaim(calls, cls.aclaim)
        for name in OPERATIONS[1:]:
            ops["a" + name] = asettle(calls, name, getattr(cls, "a" + name))
    # On the instance, not a subclass swapped in: assigning ``__class__`` makes CPython 3.11
    # turn the instance's attribute values into a dict, and every ``self.…`` read of the
    # store's own code a dict lookup while metrics are on (docs/benchmarks.md). New instance
    # attributes join the class's shared keys and leave the values where they are.
    # (``setattr``, not ``vars(store)[…]``: reading the instance's ``__dict__`` makes it too.)
    # (Each bound to the store, which holds it: a cycle until ``_restore`` deletes them.)
    try:
        for name, wrapper in ops.items():
            setattr(store, name, MethodType(wrapper, store))
    except AttributeError:  # slots and no instance dict: the first one fails, left unobserved
        return
    calls.wrapped = tuple(ops)
    setattr(store, METER, calls)
