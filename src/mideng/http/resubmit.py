"""Anti-resubmit tokens at the HTTP edge: where a token travels, and what a refusal looks like.

The framework helpers (FastAPI, Flask, Django) are thin over ``TokenGate``: it finds the token
in a header or a form field, consumes it for the caller's business key, and answers with
problem+json when there is none (400) or it is not live (409). The token endpoint returns
``{"token", "expires_in", "header", "field"}`` so a client knows where to send it back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from mideng.errors import IdempotencyError, StoreUnavailableError
from mideng.http import problem as p
from mideng.http.core import Incoming, StoredResponse, problem_response
from mideng.http.exchange import STORE_IO, unwrapped
from mideng.observability import logs
from mideng.tokens import TokenService

R = TypeVar("R")
#: A consumed token with its business key, or the refusal to send.
Admitted = tuple[str, str] | StoredResponse

TOKEN_HEADER = "X-Resubmit-Token"
TOKEN_FIELD = "resubmit_token"
_NOT_PROCESSED = "the submit was not processed; retry later"
_NOT_ISSUED = "no token was issued; retry later"

#: From the request to the business key a token is bound to, e.g. ``f"{user}:order_create"``.
BizKey = Callable[[Incoming], str]


def restore_failed(exc: Exception) -> None:
    logs.token_not_restored(exc)


@dataclass(frozen=True)
class TokenGate:
    service: TokenService
    biz_key: BizKey
    header: str = TOKEN_HEADER
    field: str = TOKEN_FIELD
    problem_base: str = p.PROBLEM_BASE

    def token_from(self, request: Incoming, form: Mapping[str, Any] | None) -> str | None:
        token = request.headers.get(self.header)
        if token is None and form is not None:
            value = form.get(self.field)
            token = value if isinstance(value, str) else None
        return token

    # -- submit ----------------------------------------------------------------------------
    def _presented(self, request: Incoming, form: Mapping[str, Any] | None) -> Admitted:
        """``(biz_key, token)`` the request presents, or the refusal when it has no token."""
        token = self.token_from(request, form)
        return self._missing() if token is None else (self.biz_key(request), token)

    def admit(self, request: Incoming, form: Mapping[str, Any] | None = None) -> Admitted:
        """``(biz_key, token)`` once consumed, or the refusal to send."""
        presented = self._presented(request, form)
        if isinstance(presented, StoredResponse):
            return presented
        try:
            consumed = self.service.consume(*presented)
        except (IdempotencyError, *STORE_IO) as exc:
            return self._failed(exc)
        return presented if consumed else self._rejected()

    async def aadmit(self, request: Incoming, form: Mapping[str, Any] | None = None) -> Admitted:
        presented = self._presented(request, form)
        if isinstance(presented, StoredResponse):
            return presented
        try:
            consumed = await self.service.aconsume(*presented)
        except (IdempotencyError, *STORE_IO) as exc:
            return self._failed(exc)
        return presented if consumed else self._rejected()

    def run_admitted(
        self, admitted: tuple[str, str], view: Callable[[], R], status: Callable[[R], int]
    ) -> R:
        """Run the view on a consumed token; give the token back if the view fails (an
        exception or a 5xx), so the user can submit the same form again."""
        key, token = admitted
        try:
            response = view()
        except Exception:
            self._restore(key, token)
            raise
        if status(response) >= 500:
            self._restore(key, token)
        return response

    def _restore(self, key: str, token: str) -> None:
        """Give the token back, best effort: a store down for it leaves the view's own answer
        (its 5xx, its exception) to the client, logged, not the store's error in its place;
        the user fetches a new token."""
        try:
            self.service.restore(key, token)
        except (IdempotencyError, *STORE_IO) as exc:
            restore_failed(exc)

    async def arestore(self, key: str, token: str) -> None:
        """``_restore`` for the async service."""
        try:
            await self.service.arestore(key, token)
        except (IdempotencyError, *STORE_IO) as exc:
            restore_failed(exc)

    # -- the token endpoint ----------------------------------------------------------------
    def issued(self, request: Incoming) -> StoredResponse:
        """The token response, or the refusal: 503 when the store is down, 400 for a business
        key the store can't hold (as the submit answers them)."""
        key = self.biz_key(request)
        try:
            return self._token_response(self.service.issue(key))
        except (IdempotencyError, *STORE_IO) as exc:
            return self._failed(exc, _NOT_ISSUED)

    async def aissued(self, request: Incoming) -> StoredResponse:
        key = self.biz_key(request)
        try:
            return self._token_response(await self.service.aissue(key))
        except (IdempotencyError, *STORE_IO) as exc:
            return self._failed(exc, _NOT_ISSUED)

    def _token_response(self, token: str) -> StoredResponse:
        body = json.dumps(
            {
                "token": token,
                "expires_in": int(self.service.ttl),
                "header": self.header,
                "field": self.field,
            }
        ).encode()
        return StoredResponse(
            200, (("content-type", "application/json"), ("cache-control", "no-store")), body
        )

    # -- refusals --------------------------------------------------------------------------
    def _missing(self) -> StoredResponse:
        return problem_response(
            p.TOKEN_MISSING,
            f"send the token from the token endpoint in "
            f"the {self.header} header or the {self.field} form field",
            base=self.problem_base,
        )

    def _rejected(self) -> StoredResponse:
        return problem_response(
            p.TOKEN_REJECTED,
            "this form was submitted already, or its token expired; fetch a new token",
            base=self.problem_base,
        )

    def _failed(self, exc: Exception, detail: str = _NOT_PROCESSED) -> StoredResponse:
        """The refusal for a store call that raised ``exc`` (an IdempotencyError, or a store's
        own I/O error let through unwrapped)."""
        error = exc if isinstance(exc, IdempotencyError) else unwrapped(exc)
        if isinstance(error, StoreUnavailableError):
            return problem_response(p.STORE_UNAVAILABLE, detail, 1.0, self.problem_base)
        return problem_response(p.TOKEN_MISSING, str(error), base=self.problem_base)
