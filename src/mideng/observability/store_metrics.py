"""Metrics of store calls: a store seen through ``counted(store)`` times and counts its record
operations while metrics are on.

Whoever calls a store's record operations for a guarded call (the Guard's drivers and
heartbeats, the consumers, their batches and held completions) calls them on
``counted(store)``: the store itself while metrics are off, else a ``CountedStore`` in front
of it — one per store and recorder, made on first use — which times each call, counts its
failures and hands the answers on. Nothing of the store is replaced: it is wrapped, and only
for those callers.

What is recorded (the names are in docs/observability.md): a claim by outcome, timed from the
guarded call's start when it is the call's first (``Call.started``, read just before) and
from its own start when it polls; a take-over when an acquired claim is over an attempt that
never finished; each settling or renewing call's duration; the body's, from its claim
acquired to the call that settles it (through the claim's owner, which is minted per call);
a store error (``StoreUnavailableError``) or a fenced write (``LeaseLostError``) by operation.
Without durations (``metrics.enable(durations=False)``) no clock is read: claims are counted,
failures counted, nothing timed.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Awaitable, Callable
from time import monotonic
from typing import Any, TypeVar

from mideng.errors import LeaseLostError, StoreUnavailableError
from mideng.observability import observers
from mideng.observability.observers import store_label
from mideng.observability.recorder import FOLD_AT, Recorder, takes_over

T = TypeVar("T")
SETTLING = ("complete", "fail", "release")
_OPEN_LIMIT = 65536  # claims remembered for the body's duration; a never-settled one is dropped


def counted(store: T) -> T:
    """``store`` as the callers of its record operations use it: counted while metrics are
    on, the store itself while they are off."""
    recorder = observers.metrics
    if recorder is None:
        return store
    assert isinstance(recorder, Recorder)
    meter = meter_of(recorder, store)
    if meter is None:  # not weak-referenceable (a test double): left uncounted
        return store
    counted_store: T = CountedStore(store, meter)  # type: ignore[assignment]
    return counted_store


def uncounted(store: Any) -> Any:
    """The store behind a counted view (a batch operation, which metrics don't count, is
    called on it), or ``store`` itself."""
    return store.inner if isinstance(store, CountedStore) else store


class Counting:
    """One caller's counted view of its store, made again only when metrics are switched on
    anew or the store changes (what a Guard asks on every call)."""

    __slots__ = ("recorder", "store", "view")

    def __init__(self) -> None:
        self.recorder: Any = None
        self.store: Any = None
        self.view: Any = None

    def of(self, store: T) -> T:
        """``counted(store)``, the view made for the last call kept while it still holds."""
        recorder = observers.metrics
        if recorder is None:
            return store
        if recorder is not self.recorder or store is not self.store:
            self.recorder, self.store, self.view = recorder, store, counted(store)
        view: T = self.view
        return view


# Each store's meter while a recorder records: its open claims outlive one counted view.
_meters: weakref.WeakKeyDictionary[Recorder, weakref.WeakKeyDictionary[Any, Meter]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def meter_of(recorder: Recorder, store: Any) -> Meter | None:
    """``store``'s meter under ``recorder`` (made on first use), None for a store that can't
    be weakly referenced."""
    try:
        by_store = _meters.get(recorder)
        found = None if by_store is None else by_store.get(store)
    except TypeError:
        return None
    if found is None:
        with _lock:
            by_store = _meters.setdefault(recorder, weakref.WeakKeyDictionary())
            found = by_store.get(store)
            if found is None:
                found = by_store[store] = Meter(recorder, store_label(store))
    return found


class Meter:
    """What one store's calls record into: the recorder, the store's label, the claims
    acquired and not yet settled (for the body's duration), and the series looked up by
    label values in one subscript."""

    def __init__(self, rec: Recorder, label: str) -> None:
        self.rec = rec
        self.label = label
        self.timed = rec.durations
        self.opened: dict[str, float] = {}  # owner -> when its claim was acquired
        self.claims: dict[tuple[str, str], list[Any]] = {}  # (scope, outcome) -> pending
        # operation -> scope -> (the operation's pending durations, the body's)
        self.stores: dict[str, dict[str, tuple[list[Any], list[Any]]]] = {}

    def began(self, req: Any) -> float:
        """When a claim is timed from: a Guard's first claim from the call's start, read just
        before it; a poll, or a claim request that is no Guard's call, from now."""
        if not self.timed:
            return 0.0
        started, polls = getattr(req, "started", None), getattr(req, "polls", None)
        if started is None or polls:
            return monotonic()
        return float(started)

    def claimed(self, req: Any, began: float, claim: Any) -> None:
        ended = monotonic() if self.timed else 0.0
        outcome: str = claim.outcome._value_  # the member's value slot: no descriptor
        record = claim.record
        if outcome == "acquired":
            if self.timed:
                if len(self.opened) >= _OPEN_LIMIT:
                    self.opened.clear()
                self.opened[req.owner] = ended
            if record.attempts > 1 and takes_over(req, record):
                self.rec.takeover(req.scope)
        pending = self.claims.get((req.scope, outcome))
        if pending is None:
            found = self.rec.get("mideng_claims", (req.scope, outcome), timed=True).pending
            pending = self.claims.setdefault((req.scope, outcome), found)
        pending.append(ended - began if self.timed else None)
        if len(pending) >= FOLD_AT:
            self.rec.fold()

    def wrote(self, operation: str, ticket: Any, began: float) -> None:
        """A settling or renewing call that answered: its duration, and the body's before a
        settling one."""
        if not self.timed:
            return
        ended = monotonic()
        pending, body = self._pending(operation, ticket.scope)
        pending.append(ended - began)
        if operation in SETTLING:
            acquired = self.opened.pop(ticket.owner, None)
            if acquired is not None:
                body.append(began - acquired)
        if len(pending) >= FOLD_AT:
            self.rec.fold()

    def failed(self, operation: str, scope: str, owner: str, exc: BaseException) -> None:
        """A store call that raised: the body ran, though its settling failed (timed to now),
        and the failure counted as a store error or a fenced write, if it is one."""
        acquired = self.opened.pop(owner, None) if operation in SETTLING else None
        if acquired is not None and self.timed:
            self._pending(operation, scope)[1].append(monotonic() - acquired)
        if isinstance(exc, StoreUnavailableError):
            self.rec.store_error(self.label, operation)
        elif isinstance(exc, LeaseLostError):
            self.rec.fenced(scope, operation)

    def _pending(self, operation: str, scope: str) -> tuple[list[Any], list[Any]]:
        by_scope = self.stores.setdefault(operation, {})
        pair = by_scope.get(scope)
        if pair is None:
            pair = (
                self.rec.get("mideng_store_call_seconds", (scope, operation), timed=True).pending,
                self.rec.get("mideng_body_seconds", (scope,), timed=True).pending,
            )
            pair = by_scope.setdefault(scope, pair)
        return pair


class CountedStore:
    """A store whose record operations are timed and counted (``Meter``); every other
    attribute is the store's own. (Claims, tickets and records are typed Any: observability
    imports nothing of the layers it observes.)"""

    def __init__(self, inner: Any, meter: Meter) -> None:
        self.inner = inner
        self.meter = meter

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # -- the claim ------------------------------------------------------------------------------
    def claim(self, req: Any) -> Any:
        began = self.meter.began(req)
        try:
            claim: Any = self.inner.claim(req)
        except BaseException as exc:
            self.meter.failed("claim", req.scope, req.owner, exc)
            raise
        self.meter.claimed(req, began, claim)
        return claim

    async def aclaim(self, req: Any) -> Any:
        began = self.meter.began(req)
        try:
            claim: Any = await self.inner.aclaim(req)
        except BaseException as exc:
            self.meter.failed("claim", req.scope, req.owner, exc)
            raise
        self.meter.claimed(req, began, claim)
        return claim

    # -- writes under a ticket ------------------------------------------------------------------
    def complete(self, ticket: Any, result: bytes, codec: str, ttl: float | None) -> Any:
        return self._write("complete", ticket, self.inner.complete, result, codec, ttl)

    def fail(self, ticket: Any, error: bytes, ttl: float | None) -> Any:
        return self._write("fail", ticket, self.inner.fail, error, ttl)

    def release(self, ticket: Any) -> None:
        self._write("release", ticket, self.inner.release)

    def heartbeat(self, ticket: Any, lease: float, ttl: float | None) -> Any:
        return self._write("heartbeat", ticket, self.inner.heartbeat, lease, ttl)

    async def acomplete(self, ticket: Any, result: bytes, codec: str, ttl: float | None) -> Any:
        return await self._awrite("complete", ticket, self.inner.acomplete, result, codec, ttl)

    async def afail(self, ticket: Any, error: bytes, ttl: float | None) -> Any:
        return await self._awrite("fail", ticket, self.inner.afail, error, ttl)

    async def arelease(self, ticket: Any) -> None:
        await self._awrite("release", ticket, self.inner.arelease)

    async def aheartbeat(self, ticket: Any, lease: float, ttl: float | None) -> Any:
        return await self._awrite("heartbeat", ticket, self.inner.aheartbeat, lease, ttl)

    # The two loops of a write: the call between the meter's two notes, blocking or awaited.
    def _write(self, operation: str, ticket: Any, write: Callable[..., T], *args: Any) -> T:
        began = monotonic() if self.meter.timed else 0.0
        try:
            answer = write(ticket, *args)
        except BaseException as exc:
            self.meter.failed(operation, ticket.scope, ticket.owner, exc)
            raise
        self.meter.wrote(operation, ticket, began)
        return answer

    async def _awrite(
        self, operation: str, ticket: Any, write: Callable[..., Awaitable[T]], *args: Any
    ) -> T:
        began = monotonic() if self.meter.timed else 0.0
        try:
            answer = await write(ticket, *args)
        except BaseException as exc:
            self.meter.failed(operation, ticket.scope, ticket.owner, exc)
            raise
        self.meter.wrote(operation, ticket, began)
        return answer
