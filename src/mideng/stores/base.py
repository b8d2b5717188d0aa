"""The store protocol, written once; and the read-decide-write base for embedded stores.

The protocol is three capabilities — records (what the Guard needs), tokens, windows — each
with every operation sync and async (``claim`` / ``aclaim`` ...); ``Store`` is all three.
Server stores (Redis, SQL) implement each operation natively as a single atomic round trip.
Embedded stores (memory, SQLite) only provide ``_transact``: run a pure function over the
current record under the store's lock or transaction. All of their operations are then the
core's rules, applied here, and their async twins those same operations offloaded.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable
from typing import Any, TypeVar

from mideng.core import decide as rules
from mideng.core import keys
from mideng.core.event_loop import to_thread
from mideng.core.record import Claim, ClaimRequest, Record, Resolution, Seen, Status, Ticket
from mideng.errors import IdempotencyError, LeaseLostError, RecordChangedError

T = TypeVar("T")

# The entry-layer primitives' namespaces, defined with the key rules that keep guarded scopes out.
TOKEN_PREFIX = keys.TOKEN_PREFIX
HIT_PREFIX = keys.HIT_PREFIX

# What a transaction function returns: its answer and the record to store
# (KEEP leaves the row alone, None deletes it).
KEEP: Any = object()
Step = Callable[[Record | None, float], tuple[T, Record | None]]


class RecordStore(abc.ABC):
    """The records capability: what the Guard needs. Times are seconds; the store's clock
    decides. Every operation has an async twin, and both are abstract: a store that forgets
    one can't be built, instead of silently running the sync one in a thread."""

    url: str = ""
    #: True where the server drops expired records itself (Redis TTLs): purge() then has
    #: nothing left to delete and returns 0.
    self_expiring: bool = False

    @abc.abstractmethod
    def claim(self, req: ClaimRequest) -> Claim: ...

    @abc.abstractmethod
    def complete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Record:
        """Store the result; LeaseLostError if ``ticket`` is no longer the live claim."""

    @abc.abstractmethod
    def fail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        """Record a failure that duplicates will replay (on_error="record")."""

    @abc.abstractmethod
    def release(self, ticket: Ticket) -> None:
        """Drop the claim so a retry runs again; LeaseLostError if it was taken over."""

    @abc.abstractmethod
    def heartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        """Extend a live claim's lease by ``lease`` seconds from now."""

    @abc.abstractmethod
    def get(self, scope: str, key: str) -> Record | None: ...

    @abc.abstractmethod
    def forget(self, scope: str, key: str) -> bool:
        """Evict one record whatever its state; True if there was one."""

    @abc.abstractmethod
    def resolve(self, scope: str, key: str, how: Resolution) -> Record:
        """Settle an UNKNOWN (or stuck processing) record after asking the provider."""

    @abc.abstractmethod
    def unresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        """UNKNOWN records, and processing ones whose lease ran out (stuck)."""

    @abc.abstractmethod
    def purge(self, limit: int | None = None) -> int:
        """Delete records whose retention ran out; returns how many."""

    @abc.abstractmethod
    def now(self) -> float:
        """The store's clock, in seconds since the epoch: the clock its leases and expiries
        are measured on (SQL now(), Redis TIME), so hosts whose own clocks disagree agree on
        it (scheduled jobs compute their slots from it)."""

    @abc.abstractmethod
    async def aclaim(self, req: ClaimRequest) -> Claim: ...

    @abc.abstractmethod
    async def acomplete(
        self, ticket: Ticket, result: bytes, codec: str, ttl: float | None
    ) -> Record: ...

    @abc.abstractmethod
    async def afail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record: ...

    @abc.abstractmethod
    async def arelease(self, ticket: Ticket) -> None: ...

    @abc.abstractmethod
    async def aheartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record: ...

    @abc.abstractmethod
    async def aget(self, scope: str, key: str) -> Record | None: ...

    @abc.abstractmethod
    async def aforget(self, scope: str, key: str) -> bool: ...

    @abc.abstractmethod
    async def aresolve(self, scope: str, key: str, how: Resolution) -> Record: ...

    @abc.abstractmethod
    async def aunresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]: ...

    @abc.abstractmethod
    async def apurge(self, limit: int | None = None) -> int: ...

    @abc.abstractmethod
    async def anow(self) -> float: ...

    def close(self) -> None:  # noqa: B027 - stores without connections have nothing to do
        """Release connections. Safe to call twice."""

    async def aclose(self) -> None:
        self.close()

    def __enter__(self) -> RecordStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TokenStore(abc.ABC):
    """The anti-resubmit token capability (mideng.tokens)."""

    @abc.abstractmethod
    def put_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        """Bind ``token`` to (scope, key) for ``ttl`` seconds, replacing any earlier token."""

    @abc.abstractmethod
    def take_token(self, scope: str, key: str, token: str) -> bool:
        """Atomically delete the binding if it holds ``token`` and is live; never GET-then-DEL."""

    @abc.abstractmethod
    async def aput_token(self, scope: str, key: str, token: str, ttl: float) -> None: ...

    @abc.abstractmethod
    async def atake_token(self, scope: str, key: str, token: str) -> bool: ...


class WindowStore(abc.ABC):
    """The sliding-window capability (per-principal debounce)."""

    @abc.abstractmethod
    def hit(self, scope: str, key: str, window: float, limit: int) -> float | None:
        """Sliding window: count a hit if fewer than ``limit`` fell in the last ``window``
        seconds and return None; otherwise count nothing and return seconds until one frees."""

    @abc.abstractmethod
    async def ahit(self, scope: str, key: str, window: float, limit: int) -> float | None: ...


class Store(RecordStore, TokenStore, WindowStore):
    """A full store: records, tokens and windows. Every store mideng ships is one; a store
    for one capability only subclasses that one."""

    def __enter__(self) -> Store:
        return self


def lease_lost(ticket: Ticket, current: Record | None) -> LeaseLostError:
    state = "gone" if current is None else f"{current.status.value}, fence {current.fence}"
    return LeaseLostError(
        f"claim on {ticket.scope}:{ticket.key} (fence {ticket.fence}) was lost; the record is "
        f"{state}. This write changed nothing.",
        current,
    )


class LocalStore(Store):
    """A store whose operations are the core's pure rules run under ``_transact``."""

    # -- async: the sync operations offloaded (written once for every embedded store) -------
    #: Why this store's async operations are its sync ones run elsewhere, not native: every
    #: embedded store must say (a quality test reads it).
    offload_reason = "an embedded store: its sync operations are short local transactions"
    #: False where sync calls never block (memory): async calls then skip the thread hop.
    blocking_io = True

    async def _offload(self, fn: Callable[..., T], *args: Any) -> T:
        if not self.blocking_io:
            return fn(*args)
        return await to_thread(fn, *args)  # asyncio's, without its getpid() system call

    async def aclaim(self, req: ClaimRequest) -> Claim:
        return await self._offload(self.claim, req)

    async def acomplete(
        self, ticket: Ticket, result: bytes, codec: str, ttl: float | None
    ) -> Record:
        return await self._offload(self.complete, ticket, result, codec, ttl)

    async def afail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        return await self._offload(self.fail, ticket, error, ttl)

    async def arelease(self, ticket: Ticket) -> None:
        await self._offload(self.release, ticket)

    async def aheartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        return await self._offload(self.heartbeat, ticket, lease, ttl)

    async def aget(self, scope: str, key: str) -> Record | None:
        return await self._offload(self.get, scope, key)

    async def aforget(self, scope: str, key: str) -> bool:
        return await self._offload(self.forget, scope, key)

    async def aput_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        await self._offload(self.put_token, scope, key, token, ttl)

    async def atake_token(self, scope: str, key: str, token: str) -> bool:
        return await self._offload(self.take_token, scope, key, token)

    async def ahit(self, scope: str, key: str, window: float, limit: int) -> float | None:
        return await self._offload(self.hit, scope, key, window, limit)

    async def aresolve(self, scope: str, key: str, how: Resolution) -> Record:
        return await self._offload(self.resolve, scope, key, how)

    async def aunresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return await self._offload(self.unresolved, scope, limit)

    async def apurge(self, limit: int | None = None) -> int:
        return await self._offload(self.purge, limit)

    async def anow(self) -> float:
        return await self._offload(self.now)

    @abc.abstractmethod
    def _transact(self, scope: str, key: str, step: Step[T]) -> T:
        """Atomically: read (scope, key), call ``step(record, now)``, write what it returns."""

    @abc.abstractmethod
    def _records(self) -> list[Record]:
        """Every record (operator views and purge only; not on a hot path)."""

    @abc.abstractmethod
    def _delete_expired(self, now: float, limit: int | None) -> int: ...

    @abc.abstractmethod
    def _now(self) -> float: ...

    def claim(self, req: ClaimRequest) -> Claim:
        def step(current: Record | None, now: float) -> tuple[Claim, Record | None]:
            claim, write = rules.decide(current, req, now)
            return claim, (claim.record if write else KEEP)

        return self._transact(req.scope, req.key, step)

    def _fenced(self, ticket: Ticket, change: Callable[[Record, float], Record | None]) -> Record:
        def step(current: Record | None, now: float) -> tuple[Record, Record | None]:
            if current is None or not rules.holds(current, ticket, now):
                raise lease_lost(ticket, current)
            new = change(current, now)
            return (new if new is not None else current), new

        return self._transact(ticket.scope, ticket.key, step)

    def complete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Record:
        return self._fenced(
            ticket, lambda cur, now: rules.completed(cur, now, result=result, codec=codec, ttl=ttl)
        )

    def fail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        return self._fenced(ticket, lambda cur, now: rules.failed(cur, now, error=error, ttl=ttl))

    def release(self, ticket: Ticket) -> None:
        self._fenced(ticket, lambda cur, now: None)

    def heartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        return self._fenced(ticket, lambda cur, now: rules.renewed(cur, now, lease, ttl))

    def get(self, scope: str, key: str) -> Record | None:
        def step(current: Record | None, now: float) -> tuple[Record | None, Record | None]:
            return (None if current is None or current.expired(now) else current), KEEP

        return self._transact(scope, key, step)

    def forget(self, scope: str, key: str) -> bool:
        return self._transact(scope, key, lambda current, now: (current is not None, None))

    def resolve(self, scope: str, key: str, how: Resolution) -> Record:
        def step(current: Record | None, now: float) -> tuple[Record, Record | None]:
            check_resolvable(scope, key, current, now, how.seen)
            assert current is not None
            if how.evict:
                return current, None
            new = rules.settled(current, now, how)
            return new, new

        return self._transact(scope, key, step)

    def unresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        now = self._now()
        found = [
            r
            for r in self._records()
            if (scope is None or r.scope == scope) and is_unresolved(r, now)
        ]
        return sorted(found, key=lambda r: r.updated_at)[:limit]

    def purge(self, limit: int | None = None) -> int:
        return self._delete_expired(self._now(), limit)

    def now(self) -> float:
        return self._now()

    # Tokens and debounce windows are records too (status SUCCEEDED), at TOKEN_PREFIX or
    # HIT_PREFIX + scope: never claimable by a guarded call, since check_scope refuses a guarded
    # scope that starts with either.
    def put_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        def step(current: Record | None, now: float) -> tuple[None, Record | None]:
            return None, Record(
                scope=TOKEN_PREFIX + scope,
                key=key,
                status=Status.SUCCEEDED,
                fence=0,
                owner=token,
                created_at=now,
                updated_at=now,
                expires_at=now + ttl,
            )

        self._transact(TOKEN_PREFIX + scope, key, step)

    def take_token(self, scope: str, key: str, token: str) -> bool:
        def step(current: Record | None, now: float) -> tuple[bool, Record | None]:
            if current is None or current.expired(now) or current.owner != token:
                return False, KEEP
            return True, None

        return self._transact(TOKEN_PREFIX + scope, key, step)

    def hit(self, scope: str, key: str, window: float, limit: int) -> float | None:
        def step(current: Record | None, now: float) -> tuple[float | None, Record | None]:
            stamps = (
                []
                if current is None or current.result is None
                else [t for t in json.loads(current.result) if t > now - window]
            )
            if len(stamps) >= limit:
                return max(stamps[-limit] + window - now, 0.001), KEEP
            stamps.append(now)
            return None, Record(
                scope=HIT_PREFIX + scope,
                key=key,
                status=Status.SUCCEEDED,
                fence=0,
                owner="",
                result=json.dumps(stamps).encode(),
                created_at=now,
                updated_at=now,
                expires_at=now + window,
            )

        return self._transact(HIT_PREFIX + scope, key, step)


def is_unresolved(record: Record, now: float) -> bool:
    if record.expired(now):
        return False
    return record.status is Status.UNKNOWN or (
        record.status is Status.PROCESSING and not record.lease_live(now)
    )


def check_resolvable(
    scope: str, key: str, current: Record | None, now: float, seen: Seen | None = None
) -> None:
    """Raise unless ``current`` may be resolved (or released) now: UNKNOWN, processing with
    its lease run out, or a kept failure (a task out of attempts), and, when the operator's
    ``seen`` is given, still at that status and fence (``RecordChangedError`` otherwise: a
    claim, a renewal or another operator came first)."""
    # A kept failure (a task out of attempts) is settled the same way, by an operator.
    kept = current is not None and current.status is Status.FAILED and current.error is not None
    resolvable = current is not None and (kept or is_unresolved(current, now))
    if seen is not None and not (resolvable and still_as_seen(current, seen)):
        state = "gone" if current is None else f"{current.status.value}, fence {current.fence}"
        raise RecordChangedError(
            f"{scope}:{key} changed meanwhile: it is {state}, it was {seen.status.value}, "
            f"fence {seen.fence}",
            current,
        )
    if not resolvable:
        state = "absent" if current is None else current.status.value
        raise IdempotencyError(
            f"{scope}:{key} is {state}; only UNKNOWN records, processing records whose lease "
            "ran out and kept failures can be resolved"
        )


def still_as_seen(current: Record | None, seen: Seen) -> bool:
    return current is not None and current.status is seen.status and current.fence == seen.fence
