"""The one switch the Guard and the HTTP exchange look at: ``on`` is None until metrics or
tracing are enabled, so with both off a guarded call pays one module-attribute test.

When on, ``Observer.drive`` runs the call through a shadow of its Guard (the same state, its
store wrapped in ``ObservedStore``): every store call is timed, counted, and traced as a child
span, and the call itself runs inside its span. The shadow is what tells the Guard's hook that
a call is already observed (``wants``), so the hook is re-entered once, not recursively.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any, Protocol

from mideng.errors import LeaseLostError, StoreUnavailableError


class Metrics(Protocol):
    def claimed(self, scope: str, outcome: str, seconds: float, takeover: bool) -> None: ...
    def stored(self, scope: str, operation: str, seconds: float) -> None: ...
    def store_error(self, store: str, operation: str) -> None: ...
    def fenced(self, scope: str, operation: str) -> None: ...
    def body(self, scope: str, seconds: float) -> None: ...
    def fail_open(self, scope: str, step: str) -> None: ...
    def heartbeat_failed(self, scope: str) -> None: ...
    def http_reply(self, status: int, replayed: bool) -> None: ...


class Tracing(Protocol):
    def call(self, call: Any, store: str) -> Any: ...
    def store_call(self, operation: str, scope: str, store: str) -> Any: ...
    def claimed(self, outcome: str, record: Any) -> None: ...
    def fail_open(self, step: str) -> None: ...


#: The observer, or None when nothing observes (the Guard's hook tests exactly this).
on: Observer | None = None
_metrics: Metrics | None = None
_tracing: Tracing | None = None


_KEEP: Any = object()


def install(*, metrics: Metrics | None = _KEEP, tracing: Tracing | None = _KEEP) -> None:
    """Swap in (an object) or out (None) metrics or tracing; an omitted one stays as it is."""
    global on, _metrics, _tracing
    if metrics is not _KEEP:
        _metrics = metrics
    if tracing is not _KEEP:
        _tracing = tracing
    on = None if _metrics is None and _tracing is None else Observer(_metrics, _tracing)


def store_label(store: Any) -> str:
    """The ``store`` label: the URL's scheme (``redis``, ``postgresql``), else the class."""
    url = getattr(store, "url", "") or ""
    scheme = url.split("://", 1)[0] if "://" in url else url.split("(", 1)[0]
    return scheme or type(store).__name__.removesuffix("Store").lower()


def _takeover(req: Any, record: Any) -> bool:
    # An acquired claim over an attempt that never finished: its lease ran out (or an operator
    # settled it as failed). A record reclaimed because its retention ran out counts no
    # attempt as unfinished: it is at least ``ttl`` older than its first claim.
    return record.attempts > 1 and (
        req.ttl is None or record.updated_at - record.created_at < req.ttl
    )


class Observer:
    def __init__(self, metrics: Metrics | None, tracing: Tracing | None) -> None:
        self.metrics = metrics
        self.tracing = tracing
        self._shadows: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    def wants(self, guard: Any) -> bool:
        return type(guard.store) is not ObservedStore

    def _shadow(self, guard: Any) -> Any:
        shadow = self._shadows.get(guard)
        if shadow is None or shadow.store.inner is not guard.store:
            shadow = object.__new__(type(guard))
            shadow.__dict__.update(vars(guard))
            shadow.store = ObservedStore(guard.store, self)
            self._shadows[guard] = shadow
        return shadow

    def _timed(self, fn: Callable[..., Any], scope: str) -> Callable[..., Any]:
        metrics = self.metrics
        if metrics is None:
            return fn

        def body(*args: Any, **kwargs: Any) -> Any:
            started = perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                metrics.body(scope, perf_counter() - started)

        return body

    def _atimed(self, fn: Callable[..., Awaitable[Any]], scope: str) -> Callable[..., Any]:
        metrics = self.metrics
        if metrics is None:
            return fn

        async def body(*args: Any, **kwargs: Any) -> Any:
            started = perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                metrics.body(scope, perf_counter() - started)

        return body

    def drive(self, guard: Any, call: Any, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        shadow = self._shadow(guard)
        body = self._timed(fn, call.scope)
        if self.tracing is None:
            return shadow.drive(call, body, args, kwargs)
        with self.tracing.call(call, shadow.store.label):
            return shadow.drive(call, body, args, kwargs)

    async def adrive(
        self, guard: Any, call: Any, fn: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any:
        shadow = self._shadow(guard)
        body = self._atimed(fn, call.scope)
        if self.tracing is None:
            return await shadow.adrive(call, body, args, kwargs)
        with self.tracing.call(call, shadow.store.label):
            return await shadow.adrive(call, body, args, kwargs)

    # -- events -----------------------------------------------------------------------------
    def claimed(self, req: Any, claim: Any, seconds: float) -> None:
        outcome: str = claim.outcome._value_  # the member's value slot: no enum descriptor
        record = claim.record
        if self.metrics is not None:
            takeover = outcome == "acquired" and _takeover(req, record)
            self.metrics.claimed(req.scope, outcome, seconds, takeover)
        if self.tracing is not None:
            self.tracing.claimed(outcome, record)

    def stored(self, scope: str, operation: str, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.stored(scope, operation, seconds)

    def failed(self, store: str, operation: str, scope: str, exc: BaseException) -> None:
        if self.metrics is None:
            return
        if isinstance(exc, StoreUnavailableError):
            self.metrics.store_error(store, operation)
        elif isinstance(exc, LeaseLostError):
            self.metrics.fenced(scope, operation)

    def fail_open(self, scope: str, step: str) -> None:
        if self.metrics is not None:
            self.metrics.fail_open(scope, step)
        if self.tracing is not None:
            self.tracing.fail_open(step)

    def heartbeat_failed(self, scope: str | None) -> None:
        if self.metrics is not None:
            self.metrics.heartbeat_failed(scope or "")

    def http_reply(self, status: int, replayed: bool) -> None:
        if self.metrics is not None:
            self.metrics.http_reply(status, replayed)


class ObservedStore:
    """A store as the observed Guard sees it: the record operations a call makes timed,
    counted and traced; everything else passed through."""

    def __init__(self, inner: Any, observer: Observer) -> None:
        self.inner = inner
        self.observer = observer
        self.label = store_label(inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _run(self, operation: str, scope: str, fn: Callable[..., Any], *args: Any) -> Any:
        observer = self.observer
        span = (
            None
            if observer.tracing is None
            else observer.tracing.store_call(operation, scope, self.label)
        )
        started = perf_counter()
        try:
            if span is None:
                value = fn(*args)
            else:
                with span:
                    value = fn(*args)
        except BaseException as exc:
            observer.failed(self.label, operation, scope, exc)
            raise
        seconds = perf_counter() - started
        if operation == "claim":  # its count and its duration, recorded together
            observer.claimed(args[0], value, seconds)
        else:
            observer.stored(scope, operation, seconds)
        return value

    async def _arun(
        self, operation: str, scope: str, fn: Callable[..., Awaitable[Any]], *args: Any
    ) -> Any:
        observer = self.observer
        span = (
            None
            if observer.tracing is None
            else observer.tracing.store_call(operation, scope, self.label)
        )
        started = perf_counter()
        try:
            if span is None:
                value = await fn(*args)
            else:
                with span:
                    value = await fn(*args)
        except BaseException as exc:
            observer.failed(self.label, operation, scope, exc)
            raise
        seconds = perf_counter() - started
        if operation == "claim":  # its count and its duration, recorded together
            observer.claimed(args[0], value, seconds)
        else:
            observer.stored(scope, operation, seconds)
        return value

    def claim(self, req: Any) -> Any:
        return self._run("claim", req.scope, self.inner.claim, req)

    def complete(self, ticket: Any, result: bytes, codec: str, ttl: float | None) -> Any:
        return self._run("complete", ticket.scope, self.inner.complete, ticket, result, codec, ttl)

    def fail(self, ticket: Any, error: bytes, ttl: float | None) -> Any:
        return self._run("fail", ticket.scope, self.inner.fail, ticket, error, ttl)

    def release(self, ticket: Any) -> Any:
        return self._run("release", ticket.scope, self.inner.release, ticket)

    def heartbeat(self, ticket: Any, lease: float, ttl: float | None) -> Any:
        return self._run("heartbeat", ticket.scope, self.inner.heartbeat, ticket, lease, ttl)

    async def aclaim(self, req: Any) -> Any:
        return await self._arun("claim", req.scope, self.inner.aclaim, req)

    async def acomplete(self, ticket: Any, result: bytes, codec: str, ttl: float | None) -> Any:
        return await self._arun(
            "complete", ticket.scope, self.inner.acomplete, ticket, result, codec, ttl
        )

    async def afail(self, ticket: Any, error: bytes, ttl: float | None) -> Any:
        return await self._arun("fail", ticket.scope, self.inner.afail, ticket, error, ttl)

    async def arelease(self, ticket: Any) -> Any:
        return await self._arun("release", ticket.scope, self.inner.arelease, ticket)

    async def aheartbeat(self, ticket: Any, lease: float, ttl: float | None) -> Any:
        return await self._arun(
            "heartbeat", ticket.scope, self.inner.aheartbeat, ticket, lease, ttl
        )
