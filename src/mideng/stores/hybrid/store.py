"""Hybrid store: Redis answers duplicates fast; a durable store is the truth.

The durable store (SQL, SQLite) decides every claim that could run a body. Redis only holds
copies of finished records (succeeded, or failed with a recorded error), written after the
durable store has them, so a duplicate of a finished call is answered by one Redis round trip
and never reaches the database. A copy can only ever say "replay" or "mismatch": whatever
happens to Redis (down, flushed, evicted, failed over), a body cannot run twice, because
"run" is only ever the durable store's answer.

When Redis fails, calls go on against the durable store alone; a WARNING says so (at most once
per ``warn_every`` seconds) and Redis is left alone for ``cooldown`` seconds, so an outage does
not add a connect timeout to every call.

Every operation that decides something is written once, as a procedure of the store calls it
makes (mideng.core.effects: each call on either side, as its sync and its async operation),
which receives each call's answer, or has its error thrown in where it was asked;
``effects.run`` makes the calls with the sync clients, ``effects.arun`` awaits the async ones.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from mideng.core import effects
from mideng.core.audit import AuditEntry, AuditQuery, AuditRow
from mideng.core.effects import Effect, Effects
from mideng.core.record import (
    FAILED,
    MISMATCH,
    REPLAY,
    SUCCEEDED,
    Claim,
    ClaimRequest,
    Record,
    Resolution,
    Ticket,
)
from mideng.errors import ConfigurationError, StoreUnavailableError
from mideng.observability import logs
from mideng.stores.audit import AuditStore
from mideng.stores.base import Store
from mideng.stores.hybrid.steps import DurableSteps
from mideng.stores.hybrid.survey import FrontedSurvey
from mideng.stores.redis.store import RedisStore

T = TypeVar("T")


def replayable(record: Record) -> bool:
    """A record whose answer never changes again until it expires or is forgotten."""
    status = record.status
    return status is SUCCEEDED or (status is FAILED and record.error is not None)


def from_copy(copy: Record | None, req: ClaimRequest) -> Claim | None:
    """The answer a copy gives by itself, or None when the durable store must decide."""
    if copy is None or not replayable(copy):
        return None
    if copy.status is FAILED and copy.attempts < req.max_attempts:
        return None  # a task's failure that may run again: only the durable store says "run"
    if req.fingerprint is not None and copy.fingerprint not in (None, req.fingerprint):
        return Claim(MISMATCH, copy)
    return Claim(REPLAY, copy)


class Outage:
    """Remembers that the fast store just failed: skip it a moment, and warn now and then."""

    def __init__(self, cooldown: float, warn_every: float) -> None:
        self.cooldown = cooldown
        self.warn_every = warn_every
        self._until = 0.0
        self._warned = float("-inf")
        self._quiet = 0
        self._lock = threading.Lock()

    def down(self) -> bool:
        return time.monotonic() < self._until

    def failed(self, exc: StoreUnavailableError) -> None:
        now = time.monotonic()
        with self._lock:
            self._until = now + self.cooldown
            if now - self._warned < self.warn_every:
                self._quiet += 1
                return
            quiet, self._quiet, self._warned = self._quiet, 0, now
        logs.redis_down(exc, quiet)


class HybridStore(Store, DurableSteps, FrontedSurvey, AuditStore):
    fast: RedisStore
    durable: Store  # every capability: tokens and windows fall back to it during an outage

    def __init__(
        self, fast: RedisStore, durable: Store, *, cooldown: float = 1.0, warn_every: float = 30.0
    ) -> None:
        self.fast = fast
        self.durable = durable
        self.url = f"hybrid(fast={fast.url}, durable={durable.url})"
        self.self_expiring = durable.self_expiring
        self.outage = Outage(cooldown, warn_every)

    @classmethod
    def in_front_of(cls, fast: Store, durable: Store) -> HybridStore:
        """What ``open_store(redis_url, durable=...)`` opens."""
        if not isinstance(fast, RedisStore):
            raise ConfigurationError(f"durable= needs a Redis URL in front, not {fast.url}")
        return cls(fast, durable)

    # -- the operations that decide, written once ---------------------------------------------
    def _claim(self, req: ClaimRequest) -> Effects[Claim]:
        # The fast side is never trusted to say "run": only a finished copy answers.
        answered, copy = False, None
        if not self.outage.down():
            try:
                copy = yield effects.call(self.fast.get, self.fast.aget, req.scope, req.key)
                answered = True
            except StoreUnavailableError as exc:
                self.outage.failed(exc)
        answer = from_copy(copy, req)
        if answer is not None:
            return answer
        claim: Claim = yield effects.call(self.durable.claim, self.durable.aclaim, req)
        if answered and copy is None and claim.outcome is REPLAY:
            yield from self._keep(claim.record)  # Redis lost the copy (flush, restart): put it back
        return claim

    def _keep(self, record: Record) -> Effects[None]:
        """Copy a record to Redis if it is final there, else drop any copy; best effort."""
        if self.outage.down():
            return
        try:
            yield self._copied(record)
        except StoreUnavailableError as exc:
            self.outage.failed(exc)

    def _copied(self, record: Record) -> Effect[object]:
        """Redis made to hold ``record``'s copy: put if it is final, else any copy dropped."""
        fast = self.fast
        if replayable(record):
            return effects.call(fast.put, fast.aput, record)
        return effects.call(fast.forget, fast.aforget, record.scope, record.key)

    def _kept(self, write: Effect[Record]) -> Effects[Record]:
        """A durable write whose record Redis then holds a copy of (or loses its copy of)."""
        record: Record = yield write
        yield from self._keep(record)
        return record

    def _forget(self, scope: str, key: str) -> Effects[bool]:
        gone: bool = yield effects.call(self.durable.forget, self.durable.aforget, scope, key)
        # Even mid-outage: a copy left behind would keep replaying what was forgotten.
        try:
            yield effects.call(self.fast.forget, self.fast.aforget, scope, key)
        except StoreUnavailableError as exc:
            self.outage.failed(exc)
            logs.redis_copy_kept(scope, key)
        return gone

    def _resolve(self, scope: str, key: str, how: Resolution) -> Effects[Record]:
        d = self.durable
        record: Record = yield effects.call(d.resolve, d.aresolve, scope, key, how)
        # Even mid-outage, and said each time (the outage's own warning may be held back): a
        # kept failure's copy left behind replays the failure the operator just settled. An
        # evicted record (``record`` as it was) leaves no copy at all.
        fast = self.fast
        try:
            if how.evict:
                yield effects.call(fast.forget, fast.aforget, scope, key)
            else:
                yield self._copied(record)
        except StoreUnavailableError as exc:
            self.outage.failed(exc)
            logs.redis_copy_kept(scope, key)
        return record

    def _either(self, on: Callable[[Store], Effect[T]]) -> Effects[T]:
        """Tokens and windows: Redis's while it answers, the durable store's meanwhile."""
        if not self.outage.down():
            try:
                answer: T = yield on(self.fast)
                return answer
            except StoreUnavailableError as exc:
                self.outage.failed(exc)
        answer = yield on(self.durable)
        return answer

    def _completed(
        self, ticket: Ticket, result: bytes, codec: str, ttl: float | None
    ) -> Effect[Record]:
        return effects.call(
            self.durable.complete, self.durable.acomplete, ticket, result, codec, ttl
        )

    def _failed(self, ticket: Ticket, error: bytes, ttl: float | None) -> Effect[Record]:
        return effects.call(self.durable.fail, self.durable.afail, ticket, error, ttl)

    # -- sync ---------------------------------------------------------------------------------
    def claim(self, req: ClaimRequest) -> Claim:
        return effects.run(self._claim(req))

    def complete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Record:
        return effects.run(self._kept(self._completed(ticket, result, codec, ttl)))

    def fail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        return effects.run(self._kept(self._failed(ticket, error, ttl)))

    def release(self, ticket: Ticket) -> None:
        self.durable.release(ticket)

    def heartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        return self.durable.heartbeat(ticket, lease, ttl)

    def get(self, scope: str, key: str) -> Record | None:
        return self.durable.get(scope, key)

    def forget(self, scope: str, key: str) -> bool:
        return effects.run(self._forget(scope, key))

    def resolve(self, scope: str, key: str, how: Resolution) -> Record:
        return effects.run(self._resolve(scope, key, how))

    def add_audit(self, entry: AuditEntry) -> None:
        self._audit().add_audit(entry)

    def audit_rows(self, query: AuditQuery) -> list[AuditRow]:
        return self._audit().audit_rows(query)

    def _audit(self) -> AuditStore:
        """The durable store's audit, where its resolves write theirs."""
        if not isinstance(self.durable, AuditStore):
            raise ConfigurationError(f"{type(self.durable).__name__} keeps no audit")
        return self.durable

    def unresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return self.durable.unresolved(scope, limit)

    def purge(self, limit: int | None = None) -> int:
        return self.durable.purge(limit)

    def now(self) -> float:
        """The durable store's clock: the truth the leases are kept on."""
        return self.durable.now()

    def put_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        effects.run(
            self._either(lambda s: effects.call(s.put_token, s.aput_token, scope, key, token, ttl))
        )

    def take_token(self, scope: str, key: str, token: str) -> bool:
        return effects.run(
            self._either(lambda s: effects.call(s.take_token, s.atake_token, scope, key, token))
        )

    def hit(self, scope: str, key: str, window: float, limit: int) -> float | None:
        return effects.run(
            self._either(lambda s: effects.call(s.hit, s.ahit, scope, key, window, limit))
        )

    def close(self) -> None:
        try:
            self.fast.close()
        finally:
            self.durable.close()

    # -- async: the same steps, awaited -------------------------------------------------------
    async def aclaim(self, req: ClaimRequest) -> Claim:
        return await effects.arun(self._claim(req))

    async def acomplete(
        self, ticket: Ticket, result: bytes, codec: str, ttl: float | None
    ) -> Record:
        return await effects.arun(self._kept(self._completed(ticket, result, codec, ttl)))

    async def afail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        return await effects.arun(self._kept(self._failed(ticket, error, ttl)))

    async def arelease(self, ticket: Ticket) -> None:
        await self.durable.arelease(ticket)

    async def aheartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        return await self.durable.aheartbeat(ticket, lease, ttl)

    async def aget(self, scope: str, key: str) -> Record | None:
        return await self.durable.aget(scope, key)

    async def aforget(self, scope: str, key: str) -> bool:
        return await effects.arun(self._forget(scope, key))

    async def aresolve(self, scope: str, key: str, how: Resolution) -> Record:
        return await effects.arun(self._resolve(scope, key, how))

    async def aadd_audit(self, entry: AuditEntry) -> None:
        await self._audit().aadd_audit(entry)

    async def aaudit_rows(self, query: AuditQuery) -> list[AuditRow]:
        return await self._audit().aaudit_rows(query)

    async def aunresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return await self.durable.aunresolved(scope, limit)

    async def anow(self) -> float:
        return await self.durable.anow()

    async def apurge(self, limit: int | None = None) -> int:
        return await self.durable.apurge(limit)

    async def aput_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        await effects.arun(
            self._either(lambda s: effects.call(s.put_token, s.aput_token, scope, key, token, ttl))
        )

    async def atake_token(self, scope: str, key: str, token: str) -> bool:
        return await effects.arun(
            self._either(lambda s: effects.call(s.take_token, s.atake_token, scope, key, token))
        )

    async def ahit(self, scope: str, key: str, window: float, limit: int) -> float | None:
        return await effects.arun(
            self._either(lambda s: effects.call(s.hit, s.ahit, scope, key, window, limit))
        )

    async def aclose(self) -> None:
        try:
            await self.fast.aclose()
        finally:
            await self.durable.aclose()
