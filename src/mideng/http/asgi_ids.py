"""The request id over ASGI: accepted or made at the edge, bound for the request, set on every
response that has none (``RequestIdMiddleware``, and the idempotency middleware, which binds it
itself when no outer layer did). Also the ASGI types the HTTP modules share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mideng.context import request_id_scope
from mideng.http.core import REQUEST_ID_HEADER
from mideng.http.headers import Headers
from mideng.http.request_id import accept_request_id

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Set in the scope by whichever layer bound the request id first; inner layers reuse it.
SCOPE_REQUEST_ID = "mideng.request_id"
REQUEST_ID_BYTES = REQUEST_ID_HEADER.encode("latin-1")


# -- request id ------------------------------------------------------------------------------
def bind_request_id(scope: Scope, headers: Headers | None = None) -> str | None:
    """The id this layer binds, or None when an outer layer already did. ``headers``: the
    scope's, when the caller read them already (one lookup rather than a scan)."""
    if SCOPE_REQUEST_ID in scope:
        return None
    if headers is not None:
        header = headers.first(REQUEST_ID_HEADER)
    else:
        header = None
        for k, v in scope.get("headers", ()):
            if k.lower() == REQUEST_ID_BYTES:
                header = v.decode("latin-1")
                break
    request_id = accept_request_id(header)
    scope[SCOPE_REQUEST_ID] = request_id
    return request_id


def tagged(start: Message, value: bytes) -> Message:
    """A response start with the request id set, unless the application set one."""
    headers = list(start.get("headers", ()))
    if any(k.lower() == REQUEST_ID_BYTES for k, _ in headers):
        return start
    headers.append((REQUEST_ID_BYTES, value))
    return {**start, "headers": headers}


def with_request_id(send: Send, request_id: str | bytes) -> Send:
    value = request_id if isinstance(request_id, bytes) else request_id.encode("latin-1")

    async def send_with_id(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = tagged(message, value)
        await send(message)

    return send_with_id


async def with_bound_id(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    request_id = bind_request_id(scope)
    if request_id is None:
        await app(scope, receive, send)
        return
    with request_id_scope(request_id):
        await app(scope, receive, with_request_id(send, request_id))


class RequestIdMiddleware:
    """Accept a well-formed X-Request-Id or make one; bind it for the request; echo it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await with_bound_id(self.app, scope, receive, send)
