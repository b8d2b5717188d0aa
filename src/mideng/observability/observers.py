"""The observers of guarded calls, each switched on or off (``install``): the switches the Guard,
the consumers and the HTTP exchange look at, and tracing's view of a store (``TracedStore``).

``metrics`` is the metrics recorder, or None: the log lines, the HTTP exchange and the
consumers count into it, and callers of a store's record operations see the store through
``store_metrics.counted`` while it is set. ``on`` is None unless tracing is enabled: a guarded
call then runs inside its span (``Observer.call``) on ``Observer.traced(store)``, which makes
a child span of every store call. Both are observers: nothing of a Guard or a store is
replaced while they are on, and a call tests each once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol


class Metrics(Protocol):
    def fail_open(self, scope: str, step: str) -> None: ...
    def heartbeat_failed(self, scope: str) -> None: ...
    def http_reply(self, status: int, replayed: bool) -> None: ...
    def consumed(self, scope: str, verdict: str) -> None: ...
    def job_slot(self, job: str, outcome: str, seconds: float | None, took_over: bool) -> None: ...


class Tracing(Protocol):
    def call(self, call: Any, store: str, name: str = ...) -> Any: ...
    def store_call(self, operation: str, scope: str, store: str) -> Any: ...
    def claimed(self, outcome: str, record: Any) -> None: ...
    def fail_open(self, step: str) -> None: ...


#: The tracing observer, or None (the Guard's hook tests exactly this).
on: Observer | None = None
#: The metrics recorder, or None.
metrics: Metrics | None = None
_KEEP: Any = object()


def install(*, metrics: Metrics | None = _KEEP, tracing: Tracing | None = _KEEP) -> None:
    """Swap in (an object) or out (None) metrics or tracing; an omitted one stays as it is."""
    global on
    if metrics is not _KEEP:
        globals()["metrics"] = metrics
    if tracing is not _KEEP:
        on = None if tracing is None else Observer(tracing)


def store_label(store: Any) -> str:
    """The ``store`` label and attribute: the URL's scheme (``redis``, ``postgresql``), else
    the class."""
    url = getattr(store, "url", "") or ""
    scheme = url.split("://", 1)[0] if "://" in url else url.split("(", 1)[0]
    return scheme or type(store).__name__.removesuffix("Store").lower()


class Observer:
    """Tracing, as a guarded call sees it: its span, and its store with a span per call."""

    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing

    def call(self, call: Any, store: Any) -> Any:
        """The ``mideng.call`` span of one guarded call on ``store``."""
        return self.tracing.call(call, store_label(store))

    def traced(self, store: Any, label: str) -> Any:
        """``store`` with a child span per record operation, each labelled ``label``."""
        return TracedStore(store, self.tracing, label)

    def fail_open(self, step: str) -> None:
        self.tracing.fail_open(step)


class TracedStore:
    """A store as a traced call sees it: a child span per record operation; everything else
    passed through."""

    def __init__(self, inner: Any, tracing: Tracing, label: str) -> None:
        self.inner = inner
        self.tracing = tracing
        self.label = label

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _run(self, operation: str, scope: str, fn: Callable[..., Any], *args: Any) -> Any:
        with self.tracing.store_call(operation, scope, self.label):
            value = fn(*args)
        if operation == "claim":
            self.tracing.claimed(value.outcome.value, value.record)
        return value

    async def _arun(
        self, operation: str, scope: str, fn: Callable[..., Awaitable[Any]], *args: Any
    ) -> Any:
        with self.tracing.store_call(operation, scope, self.label):
            value = await fn(*args)
        if operation == "claim":
            self.tracing.claimed(value.outcome.value, value.record)
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
