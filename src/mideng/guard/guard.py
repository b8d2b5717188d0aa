"""Guard: runs a body at most once per (scope, key), configured per scope.

``run`` / ``arun`` (and the decorator, transactional mode, the HTTP exchange, operations and
consumers) prepare a call and hand it to the pipeline (mideng.guard.pipeline), with the store
as the observers see it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ParamSpec, TypeVar, overload

from mideng.context import get_request_id
from mideng.core.callables import LIMIT, learn
from mideng.core.canonical import fingerprint as make_fingerprint
from mideng.core.flow import Call
from mideng.core.keys import MAX_KEY_LENGTH, KeySpec, check_key, check_scope
from mideng.core.policy import Policy
from mideng.core.record import Record
from mideng.core.settle import UNSET, resolution
from mideng.errors import ConfigurationError
from mideng.guard.decorator import build
from mideng.guard.heartbeat.threads import Heartbeats
from mideng.guard.owner_ids import OWNERS
from mideng.guard.pipeline import TERMS, Args, AsyncBody, Body, Kwargs, Terms
from mideng.guard.pipeline import adrive as pipeline_adrive
from mideng.guard.pipeline import drive as pipeline_drive
from mideng.observability import logs, observers
from mideng.observability.observers import Observer, store_label
from mideng.observability.store_metrics import Counting
from mideng.operations.methods import Operations
from mideng.stores.base import Store
from mideng.stores.registry import open_store

R = TypeVar("R")
P = ParamSpec("P")


class Guard(Operations):
    """Runs a body at most once per (scope, key) and replays its result to duplicates.

    Multi-step operations (``operation``, ``step``, ``pending``, ``reconcile``, ``stale``)
    come from mideng.operations."""

    def __init__(
        self,
        store: Store | str,
        *,
        lease: float = 60.0,
        ttl: float | None = 86400.0,
        **options: Any,
    ) -> None:
        self.store = open_store(store) if isinstance(store, str) else store
        self._scopes: dict[str, Policy] = {}
        # Per scope that passed check_scope: its policy, so a call finds both in one lookup.
        self._ready: dict[str, Policy] = {}
        self.defaults = Policy(lease=lease, ttl=ttl).merged(**options)
        self._heartbeats = Heartbeats()
        self._counting = Counting()  # the store as the calls see it while metrics are on
        # Per body, learnt on first sight: its return type, and whether it is a coroutine.
        self._bodies: dict[Callable[..., Any], tuple[Any, bool]] = {}

    @property
    def defaults(self) -> Policy:
        """The policy of every scope not configured on its own."""
        return self._defaults

    @defaults.setter
    def defaults(self, policy: Policy) -> None:
        self._defaults = policy
        self._ready.clear()

    # -- configuration ------------------------------------------------------------------------
    def configure_scope(self, scope: str, **options: Any) -> Policy:
        """Set a scope's policy (e.g. ``on_expiry="unknown"`` for a charge)."""
        policy = self._scopes.get(check_scope(scope), self._defaults).merged(**options)
        self._scopes[scope] = policy
        self._ready.pop(scope, None)
        return policy

    def policy(self, scope: str, **overrides: Any) -> Policy:
        base = self._scopes.get(scope, self._defaults)
        return base.merged(**overrides) if overrides else base

    @overload
    def idempotent(self, scope: Callable[P, R], /) -> Callable[P, R]: ...

    @overload
    def idempotent(
        self,
        scope: str,
        /,
        *,
        key: KeySpec = None,
        payload: Callable[..., Any] | None = None,
        **options: Any,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...

    def idempotent(
        self,
        scope: str | Callable[P, R],
        /,
        *,
        key: KeySpec = None,
        payload: Callable[..., Any] | None = None,
        **options: Any,
    ) -> Any:
        """Decorate a ``def`` or ``async def`` so it runs once per (scope, rendered key).

        ``key``: a template over the arguments (``"{notify.trade_no}"``), a callable taking
        (some of) the arguments by name, or None for a hash of all arguments. ``payload``: a
        callable like ``key`` whose value is fingerprinted, so reusing a key for different data
        raises PayloadMismatchError. Other options override the scope's policy (lease, ttl,
        on_error, in_progress, wait_timeout, on_expiry, codec, heartbeat).
        """
        return build(lambda: self, scope, key, payload, options)

    # -- the drivers --------------------------------------------------------------------------
    def run(
        self,
        scope: str,
        key: str,
        fn: Callable[..., R],
        /,
        *args: Any,
        payload: Any = None,
        policy: Policy | Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> R:
        """Run ``fn(*args, **kwargs)`` once for (scope, key); duplicates get its result.

        ``payload`` is fingerprinted (a reused key with other data raises
        PayloadMismatchError); ``policy`` overrides the scope's policy for this call, as a
        Policy (``guard.policy(scope, on_error="record")``) or a mapping of options. Both are
        taken by ``run`` itself: a body whose own arguments have those names gets them through
        ``functools.partial``.
        """
        known = self._bodies.get(fn)
        _hint, coroutine = known if known is not None else learn(self._bodies, fn)
        if coroutine:
            raise ConfigurationError("run() got a coroutine function; use await guard.arun()")
        override = None if policy is None else self._override(scope, policy)
        call = self.prepare(scope, key, fn, payload, override)  # finds the hint just learnt
        return self.drive(call, fn, args, kwargs)

    async def arun(
        self,
        scope: str,
        key: str,
        fn: Callable[..., Awaitable[R]],
        /,
        *args: Any,
        payload: Any = None,
        policy: Policy | Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> R:
        """``run`` for ``async def`` bodies: the same arguments, awaited."""
        override = None if policy is None else self._override(scope, policy)
        call = self.prepare(scope, key, fn, payload, override)
        return await self.adrive(call, fn, args, kwargs)

    def _override(self, scope: str, policy: Policy | Mapping[str, Any]) -> Policy:
        if isinstance(policy, Policy):
            return policy
        if not isinstance(policy, Mapping):
            raise ConfigurationError(
                f"policy= must be a Policy or a mapping of options, got {type(policy).__name__}"
            )
        return self.policy(scope, **policy)

    def prepare(
        self, scope: str, key: str, fn: Body, payload: Any, policy: Policy | None = None
    ) -> Call:
        """The call ``run`` / ``arun`` drive for ``fn`` under (scope, key): the key checked,
        the payload fingerprinted, the scope's policy (or ``policy``) applied."""
        known = self._bodies.get(fn)
        hint = known[0] if known is not None else learn(self._bodies, fn)[0]
        # The usual key (a short ASCII str) passes check_key's rules in a few C calls; any
        # other goes through check_key, which normalises or refuses it.
        if (
            type(key) is not str
            or not 0 < len(key) <= MAX_KEY_LENGTH
            or not key.isascii()
            or "\x00" in key
        ):
            key = check_key(key)  # before the payload: a bad key is the error a caller sees first
        try:
            fp = None if payload is None else make_fingerprint(payload)
        except TypeError as exc:  # canonical_bytes turns every unspellable value into this
            raise ConfigurationError(f"payload can't be fingerprinted: {exc}") from exc
        # A scope is checked once, not on every call (exact str: a subclass could redefine ==).
        p = self._ready.get(scope) if type(scope) is str else None
        if p is None:
            p = self._ready_scope(scope)
        if policy is not None:
            p = policy
        owner, request_id, started = next(OWNERS.ids), get_request_id(), time.monotonic()
        return Call(
            scope,
            key,
            owner,
            p.lease,
            p.ttl,
            fp,
            p.on_expiry,
            request_id,
            p.retry_limit,
            p,
            started,
            hint,
        )

    def _ready_scope(self, scope: str) -> Policy:
        check_scope(scope)
        p = self._scopes.get(scope, self._defaults)
        if type(scope) is str:
            if len(self._ready) >= LIMIT:
                self._ready.clear()
            self._ready[scope] = p
        return p

    # -- the pipeline (mideng.guard.pipeline), seen by the observers ----------------------------
    # Observers see the call through its store: counted while metrics are on
    # (``store_metrics.counted``), and traced, inside the call's span, while tracing is.
    def drive(
        self, call: Call, fn: Callable[..., R], args: Args, kwargs: Kwargs, terms: Terms = TERMS
    ) -> R:
        store = self.store if observers.metrics is None else self._counting.of(self.store)
        if observers.on is None:
            return pipeline_drive(store, self._heartbeats, call, fn, args, kwargs, terms)
        with observers.on.call(call, self.store):
            traced = observers.on.traced(store, store_label(self.store))
            return pipeline_drive(traced, self._heartbeats, call, fn, args, kwargs, terms)

    def adrive(
        self, call: Call, fn: AsyncBody[R], args: Args, kwargs: Kwargs, terms: Terms = TERMS
    ) -> Awaitable[R]:
        store = self.store if observers.metrics is None else self._counting.of(self.store)
        observer = observers.on
        if observer is None:  # the pipeline's own coroutine: nothing to wrap around it
            return pipeline_adrive(store, call, fn, args, kwargs, terms)
        return self._observed(observer, store, call, fn, args, kwargs, terms)

    async def _observed(
        self,
        observer: Observer,
        store: Store,
        call: Call,
        fn: AsyncBody[R],
        args: Args,
        kwargs: Kwargs,
        terms: Terms,
    ) -> R:
        with observer.call(call, self.store):
            traced = observer.traced(store, store_label(self.store))
            return await pipeline_adrive(traced, call, fn, args, kwargs, terms)

    def log_duplicate(self, call: Call) -> None:
        logs.duplicate(call)

    # -- transactional mode (SQL): the record commits or rolls back with the caller's writes --
    def transaction(
        self, conn: Any, scope: str, key: str, *, payload: Any = None, **options: Any
    ) -> Any:
        """``with guard.transaction(conn, scope, key) as tx:``; see mideng.guard.transaction."""
        from mideng.guard.transaction import transaction

        return transaction(self, conn, scope, key, payload=payload, **options)

    def atransaction(
        self, conn: Any, scope: str, key: str, *, payload: Any = None, **options: Any
    ) -> Any:
        """``async with guard.atransaction(conn, scope, key) as tx:`` for async SQLAlchemy."""
        from mideng.guard.transaction import atransaction

        return atransaction(self, conn, scope, key, payload=payload, **options)

    # -- operator tools -----------------------------------------------------------------------
    def get(self, scope: str, key: str) -> Record | None:
        return self.store.get(check_scope(scope), check_key(key))

    async def aget(self, scope: str, key: str) -> Record | None:
        return await self.store.aget(check_scope(scope), check_key(key))

    def forget(self, scope: str, key: str) -> bool:
        return self.store.forget(check_scope(scope), check_key(key))

    async def aforget(self, scope: str, key: str) -> bool:
        return await self.store.aforget(check_scope(scope), check_key(key))

    def unresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return self.store.unresolved(None if scope is None else check_scope(scope), limit)

    async def aunresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return await self.store.aunresolved(None if scope is None else check_scope(scope), limit)

    def resolve(self, scope: str, key: str, *, result: Any = UNSET, failed: bool = False) -> Record:
        """Settle an UNKNOWN record: ``result=`` (it happened) or ``failed=True`` (it didn't)."""
        policy = self.policy(check_scope(scope))
        return self.store.resolve(scope, check_key(key), resolution(policy, result, failed))

    async def aresolve(
        self, scope: str, key: str, *, result: Any = UNSET, failed: bool = False
    ) -> Record:
        policy = self.policy(check_scope(scope))
        how = resolution(policy, result, failed)
        return await self.store.aresolve(scope, check_key(key), how)

    def purge(self, limit: int | None = None) -> int:
        return self.store.purge(limit)

    async def apurge(self, limit: int | None = None) -> int:
        return await self.store.apurge(limit)

    def close(self) -> None:
        self.store.close()

    async def aclose(self) -> None:
        await self.store.aclose()
