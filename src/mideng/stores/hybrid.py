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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from mideng.core.record import Claim, ClaimRequest, Outcome, Record, Status, Ticket
from mideng.errors import ConfigurationError, StoreUnavailableError
from mideng.stores.base import Store
from mideng.stores.redis.store import RedisStore

T = TypeVar("T")
log = logging.getLogger("mideng")


def replayable(record: Record) -> bool:
    """A record whose answer never changes again until it expires or is forgotten."""
    return record.status is Status.SUCCEEDED or (
        record.status is Status.FAILED and record.error is not None
    )


def from_copy(copy: Record | None, req: ClaimRequest) -> Claim | None:
    """The answer a copy gives by itself, or None when the durable store must decide."""
    if copy is None or not replayable(copy):
        return None
    if req.fingerprint is not None and copy.fingerprint not in (None, req.fingerprint):
        return Claim(Outcome.MISMATCH, copy)
    return Claim(Outcome.REPLAY, copy)


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
        log.warning(
            "redis unavailable, answering from durable store: %s "
            "(%d more failures since the last warning)",
            exc,
            quiet,
        )


class HybridStore(Store):
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

    # -- the fast side, never trusted to say "run" --------------------------------------------
    def _copy_of(self, req: ClaimRequest) -> tuple[bool, Record | None]:
        """(whether Redis answered, the copy it holds)."""
        if self.outage.down():
            return False, None
        try:
            return True, self.fast.get(req.scope, req.key)
        except StoreUnavailableError as exc:
            self.outage.failed(exc)
            return False, None

    def _keep(self, record: Record, *, always: bool = False) -> None:
        """Copy a record to Redis if it is final there, else drop any copy; best effort."""
        if self.outage.down() and not always:
            return
        try:
            if replayable(record):
                self.fast.put(record)
            else:
                self.fast.forget(record.scope, record.key)
        except StoreUnavailableError as exc:
            self.outage.failed(exc)

    def _either(self, fast: Callable[[], T], durable: Callable[[], T]) -> T:
        if not self.outage.down():
            try:
                return fast()
            except StoreUnavailableError as exc:
                self.outage.failed(exc)
        return durable()

    # -- sync ---------------------------------------------------------------------------------
    def claim(self, req: ClaimRequest) -> Claim:
        answered, copy = self._copy_of(req)
        answer = from_copy(copy, req)
        if answer is not None:
            return answer
        claim = self.durable.claim(req)
        if answered and copy is None and claim.outcome is Outcome.REPLAY:
            self._keep(claim.record)  # Redis lost the copy (flush, restart): put it back
        return claim

    def complete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Record:
        record = self.durable.complete(ticket, result, codec, ttl)
        self._keep(record)
        return record

    def fail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        record = self.durable.fail(ticket, error, ttl)
        self._keep(record)
        return record

    def release(self, ticket: Ticket) -> None:
        self.durable.release(ticket)

    def heartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        return self.durable.heartbeat(ticket, lease, ttl)

    def get(self, scope: str, key: str) -> Record | None:
        return self.durable.get(scope, key)

    def forget(self, scope: str, key: str) -> bool:
        gone = self.durable.forget(scope, key)
        # Even mid-outage: a copy left behind would keep replaying what was forgotten.
        try:
            self.fast.forget(scope, key)
        except StoreUnavailableError as exc:
            self.outage.failed(exc)
            log.warning(
                "could not drop the Redis copy of %s:%s; it replays until it expires", scope, key
            )
        return gone

    def resolve(
        self,
        scope: str,
        key: str,
        *,
        result: bytes | None,
        codec: str | None,
        failed: bool,
        ttl: float | None,
    ) -> Record:
        record = self.durable.resolve(
            scope, key, result=result, codec=codec, failed=failed, ttl=ttl
        )
        self._keep(record, always=True)
        return record

    def unresolved(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return self.durable.unresolved(scope, limit)

    def purge(self, limit: int | None = None) -> int:
        return self.durable.purge(limit)

    def put_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        self._either(
            lambda: self.fast.put_token(scope, key, token, ttl),
            lambda: self.durable.put_token(scope, key, token, ttl),
        )

    def take_token(self, scope: str, key: str, token: str) -> bool:
        return self._either(
            lambda: self.fast.take_token(scope, key, token),
            lambda: self.durable.take_token(scope, key, token),
        )

    def hit(self, scope: str, key: str, window: float, limit: int) -> float | None:
        return self._either(
            lambda: self.fast.hit(scope, key, window, limit),
            lambda: self.durable.hit(scope, key, window, limit),
        )

    def close(self) -> None:
        try:
            self.fast.close()
        finally:
            self.durable.close()

    # -- async: the same steps, awaited -------------------------------------------------------
    async def _acopy_of(self, req: ClaimRequest) -> tuple[bool, Record | None]:
        if self.outage.down():
            return False, None
        try:
            return True, await self.fast.aget(req.scope, req.key)
        except StoreUnavailableError as exc:
            self.outage.failed(exc)
            return False, None

    async def _akeep(self, record: Record, *, always: bool = False) -> None:
        if self.outage.down() and not always:
            return
        try:
            if replayable(record):
                await self.fast.aput(record)
            else:
                await self.fast.aforget(record.scope, record.key)
        except StoreUnavailableError as exc:
            self.outage.failed(exc)

    async def _aeither(
        self, fast: Callable[[], Awaitable[T]], durable: Callable[[], Awaitable[T]]
    ) -> T:
        if not self.outage.down():
            try:
                return await fast()
            except StoreUnavailableError as exc:
                self.outage.failed(exc)
        return await durable()

    async def aclaim(self, req: ClaimRequest) -> Claim:
        answered, copy = await self._acopy_of(req)
        answer = from_copy(copy, req)
        if answer is not None:
            return answer
        claim = await self.durable.aclaim(req)
        if answered and copy is None and claim.outcome is Outcome.REPLAY:
            await self._akeep(claim.record)
        return claim

    async def acomplete(
        self, ticket: Ticket, result: bytes, codec: str, ttl: float | None
    ) -> Record:
        record = await self.durable.acomplete(ticket, result, codec, ttl)
        await self._akeep(record)
        return record

    async def afail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Record:
        record = await self.durable.afail(ticket, error, ttl)
        await self._akeep(record)
        return record

    async def arelease(self, ticket: Ticket) -> None:
        await self.durable.arelease(ticket)

    async def aheartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Record:
        return await self.durable.aheartbeat(ticket, lease, ttl)

    async def aget(self, scope: str, key: str) -> Record | None:
        return await self.durable.aget(scope, key)

    async def aforget(self, scope: str, key: str) -> bool:
        gone = await self.durable.aforget(scope, key)
        try:
            await self.fast.aforget(scope, key)
        except StoreUnavailableError as exc:
            self.outage.failed(exc)
            log.warning(
                "could not drop the Redis copy of %s:%s; it replays until it expires", scope, key
            )
        return gone

    async def aput_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        await self._aeither(
            lambda: self.fast.aput_token(scope, key, token, ttl),
            lambda: self.durable.aput_token(scope, key, token, ttl),
        )

    async def atake_token(self, scope: str, key: str, token: str) -> bool:
        return await self._aeither(
            lambda: self.fast.atake_token(scope, key, token),
            lambda: self.durable.atake_token(scope, key, token),
        )

    async def ahit(self, scope: str, key: str, window: float, limit: int) -> float | None:
        return await self._aeither(
            lambda: self.fast.ahit(scope, key, window, limit),
            lambda: self.durable.ahit(scope, key, window, limit),
        )

    async def aclose(self) -> None:
        try:
            await self.fast.aclose()
        finally:
            await self.durable.aclose()
