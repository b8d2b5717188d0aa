"""Per-principal debounce: "the same user may not call this route twice within N seconds".

A sliding window on the store (``Store.hit``): a call is counted only when fewer than ``limit``
calls by the same principal to the same operation fell in the last ``window`` seconds;
otherwise it is refused with 429 and a Retry-After of the seconds until the oldest counted call
leaves the window. Refused calls are not counted, so hammering does not extend the wait.

This is debounce, not deduplication: two different operations in quick succession are both
refused the same way. Use an Idempotency-Key or a resubmit token to tell retries apart.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from mideng.core.keys import check_entry_scope, check_text
from mideng.errors import ConfigurationError, IdempotencyError, StoreUnavailableError
from mideng.http import problem as p
from mideng.http.core import Incoming, Principal, StoredResponse, problem_response
from mideng.http.exchange import STORE_IO, unwrapped
from mideng.stores.base import Store
from mideng.stores.registry import open_store

_MAX_KEY = 200


def _spelled(text: str) -> str:
    # Debouncer refuses a lone surrogate (an undecodable path, a badly decoded header); at the
    # edge it is spelled as its escape instead, so the caller is braked rather than answered
    # with a server error. Not one-to-one ("\udcff" and its escape share a window), which a
    # brake can afford: the worst case is one more refusal, never another caller's response.
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


class Debouncer:
    """At most ``limit`` calls per ``window`` seconds per (principal, operation)."""

    def __init__(
        self, store: Store | str, window: float = 2.0, limit: int = 1, scope: str = "debounce"
    ) -> None:
        if isinstance(window, bool) or not window > 0 or not math.isfinite(window):
            raise ConfigurationError(f"window must be a positive number of seconds: {window!r}")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ConfigurationError(f"limit must be a whole number >= 1: {limit!r}")
        self.store = open_store(store) if isinstance(store, str) else store
        self.window = float(window)
        self.limit = limit
        self.scope = check_entry_scope(scope)

    @staticmethod
    def key(principal: str, operation: str) -> str:
        # The principal's own "|" and backslash are escaped, so the first bare "|" ends it:
        # ("a|b", "c") and ("a", "b|c") are two windows. A hashed key has no "|" at all.
        who = principal.replace("\\", "\\\\").replace("|", "\\|")
        key = check_text(f"{who}|{operation}", "debounce key")
        if len(key) > _MAX_KEY:
            key = "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()
        return key

    def hit(self, principal: str, operation: str) -> float | None:
        """None: counted, go ahead. A number: refused; seconds until a call is allowed."""
        return self.store.hit(self.scope, self.key(principal, operation), self.window, self.limit)

    async def ahit(self, principal: str, operation: str) -> float | None:
        return await self.store.ahit(
            self.scope, self.key(principal, operation), self.window, self.limit
        )


@dataclass(frozen=True)
class DebounceGate:
    """The HTTP side: who is calling, which operation, and the 429 answer.

    ``principal`` returning None (an anonymous caller) skips the check: a shared anonymous
    bucket would let one caller lock out every other.
    """

    debouncer: Debouncer
    principal: Principal
    operation: str | None = None
    problem_base: str = p.PROBLEM_BASE

    def _subject(self, request: Incoming, route: str | None) -> tuple[str, str] | None:
        who = self.principal(request)
        if not who:
            return None
        operation = self.operation or f"{request.method.upper()} {route or request.path}"
        return _spelled(str(who)), _spelled(operation)

    def check(self, request: Incoming, route: str | None = None) -> StoredResponse | None:
        subject = self._subject(request, route)
        if subject is None:
            return None
        try:
            return self._answer(self.debouncer.hit(*subject))
        except (IdempotencyError, *STORE_IO) as exc:
            return self._failed(exc)

    async def acheck(self, request: Incoming, route: str | None = None) -> StoredResponse | None:
        subject = self._subject(request, route)
        if subject is None:
            return None
        try:
            return self._answer(await self.debouncer.ahit(*subject))
        except (IdempotencyError, *STORE_IO) as exc:
            return self._failed(exc)

    def _answer(self, wait: float | None) -> StoredResponse | None:
        if wait is None:
            return None
        return problem_response(
            p.TOO_SOON,
            f"at most {self.debouncer.limit} call(s) per "
            f"{self.debouncer.window:g} s; retry after the delay",
            wait,
            self.problem_base,
        )

    def _failed(self, exc: Exception) -> StoredResponse:
        """The 503 for a store that is down (a store's own I/O error let through unwrapped is
        one); any other IdempotencyError is raised."""
        error = exc if isinstance(exc, IdempotencyError) else unwrapped(exc)
        if not isinstance(error, StoreUnavailableError):
            raise error
        return problem_response(
            p.STORE_UNAVAILABLE, "not processed; retry later", 1.0, self.problem_base
        )
