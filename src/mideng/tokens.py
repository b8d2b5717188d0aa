"""Anti-resubmit tokens: issue one per form, consume it atomically on submit, restore on failure.

The server issues a random token bound to a business key (user + operation, e.g.
``"u42:order_create"``) with a TTL. The submit consumes it in one atomic step (the store's
compare-and-delete: a Lua script on Redis, one conditional ``DELETE`` on SQL, one transaction on
SQLite), so of any number of concurrent submits exactly one wins; it is never read first and
deleted later. A business run that fails may ``restore`` the token so the user can submit again.

Issuing a new token for a business key replaces the earlier one: one live token per key.
"""

from __future__ import annotations

import contextlib
import math
import re
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import TypeGuard

from mideng.core import effects
from mideng.core.effects import Effects
from mideng.core.keys import check_entry_scope, check_key
from mideng.errors import ConfigurationError, TokenRejectedError
from mideng.observability import logs
from mideng.stores.base import Store
from mideng.stores.registry import open_store

# What ``issue`` makes; anything else is refused without a store round trip.
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,128}")


def well_formed(token: object) -> TypeGuard[str]:
    return isinstance(token, str) and _TOKEN.fullmatch(token) is not None


class TokenService:
    """``issue`` / ``consume`` / ``restore`` tokens on a store, sync and async.

    ``ttl``: seconds an issued token stays valid (30 minutes by default). ``restore_ttl``:
    the validity a restored token gets, fresh from the moment of the restore (the remaining
    time is gone with the consumed binding); defaults to ``ttl``.
    """

    def __init__(
        self,
        store: Store | str,
        ttl: float = 1800.0,
        scope: str = "default",
        *,
        restore_ttl: float | None = None,
    ) -> None:
        for name, value in (("ttl", ttl), ("restore_ttl", restore_ttl)):
            if value is not None and (
                isinstance(value, bool) or not value > 0 or not math.isfinite(value)
            ):
                raise ConfigurationError(f"{name} must be a positive number of seconds: {value!r}")
        self.store = open_store(store) if isinstance(store, str) else store
        self.ttl = float(ttl)
        self.restore_ttl = float(restore_ttl) if restore_ttl is not None else self.ttl
        self.scope = check_entry_scope(scope)

    @staticmethod
    def new_token() -> str:
        return secrets.token_urlsafe(24)

    # -- sync --------------------------------------------------------------------------------
    def issue(self, biz_key: str) -> str:
        """A fresh token for ``biz_key``; any earlier token for it stops working."""
        return effects.run(self._issued(biz_key))

    def consume(self, biz_key: str, token: str | None) -> bool:
        """True exactly once per issued token, while it is live; never for a guess."""
        return effects.run(self._consumed(biz_key, token))

    def restore(self, biz_key: str, token: str) -> None:
        """Make a consumed token usable again (after the business run failed)."""
        effects.run(self._restored(biz_key, token))

    @contextlib.contextmanager
    def spend(self, biz_key: str, token: str | None) -> Iterator[str]:
        """Consume or raise TokenRejectedError; restore when the block raises an Exception
        (not on cancellation: whether the work happened is then unknown). A restore the store
        refuses is logged and the block's exception stands: replaced by the store's error, the
        caller's own failure would be lost."""
        spent = effects.run(self._spent(biz_key, token))
        try:
            yield spent
        except Exception:
            effects.run(self._given_back(biz_key, spent))
            raise

    # -- async -------------------------------------------------------------------------------
    async def aissue(self, biz_key: str) -> str:
        return await effects.arun(self._issued(biz_key))

    async def aconsume(self, biz_key: str, token: str | None) -> bool:
        return await effects.arun(self._consumed(biz_key, token))

    async def arestore(self, biz_key: str, token: str) -> None:
        await effects.arun(self._restored(biz_key, token))

    @contextlib.asynccontextmanager
    async def aspend(self, biz_key: str, token: str | None) -> AsyncIterator[str]:
        spent = await effects.arun(self._spent(biz_key, token))
        try:
            yield spent
        except Exception:
            await effects.arun(self._given_back(biz_key, spent))
            raise

    # -- each written once (mideng.core.effects) -----------------------------------------------
    def _issued(self, biz_key: str) -> Effects[str]:
        token, key, store = self.new_token(), check_key(biz_key), self.store
        yield effects.call(store.put_token, store.aput_token, self.scope, key, token, self.ttl)
        return token

    def _consumed(self, biz_key: str, token: str | None) -> Effects[bool]:
        if not well_formed(token):
            return False
        store = self.store
        taken: bool = yield effects.call(
            store.take_token, store.atake_token, self.scope, check_key(biz_key), token
        )
        return taken

    def _restored(self, biz_key: str, token: str) -> Effects[None]:
        if not well_formed(token):
            raise TokenRejectedError("only a token this service issued can be restored")
        key, store = check_key(biz_key), self.store
        yield effects.call(
            store.put_token, store.aput_token, self.scope, key, token, self.restore_ttl
        )

    def _spent(self, biz_key: str, token: str | None) -> Effects[str]:
        """The token, consumed; TokenRejectedError when it can't be."""
        if not (yield from self._consumed(biz_key, token)):
            raise TokenRejectedError(
                f"token for {biz_key!r} was already used, has expired or was never issued"
            )
        assert token is not None  # consumed: well formed
        return token

    def _given_back(self, biz_key: str, token: str) -> Effects[None]:
        """The token restored after the block failed; a store that refuses is logged, so the
        block's own error stays the caller's answer."""
        try:
            yield from self._restored(biz_key, token)
        except Exception as exc:
            logs.token_not_restored(exc)
