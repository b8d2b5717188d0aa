"""Pure ASGI middleware for Starlette, FastAPI and any ASGI application.

No BaseHTTPMiddleware: each request gets fresh state (a ``Capture``, which replays the body
read to the application), nothing is shared between requests but the options. A guarded
request's body is read up to ``max_body`` before anything is stored; the application's
response is held back until it is complete, then stored and sent. A response that turns out to
be an event stream or larger than ``max_response`` is passed through as it comes, and its key
released.

    app.add_middleware(IdempotencyMiddleware, guard=guard, required=False, principal=None)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from urllib.parse import unquote_to_bytes

from mideng.context import enter_request_id, leave_request_id
from mideng.guard import Guard
from mideng.http.asgi_capture import Capture, Disconnected, capturable, read_body
from mideng.http.asgi_ids import (
    SCOPE_REQUEST_ID,
    ASGIApp,
    Message,
    Receive,
    RequestIdMiddleware,
    Scope,
    Send,
    bind_request_id,
    with_bound_id,
    with_request_id,
)
from mideng.http.asgi_send import send_response
from mideng.http.core import (
    DEFAULT_METHODS,
    HttpOptions,
    Incoming,
    MiB,
    Principal,
    Route,
    StoredResponse,
    storable_status,
)
from mideng.http.exchange import arun
from mideng.http.headers import Headers
from mideng.http.identity import text_bytes
from mideng.http.problem import PROBLEM_BASE

# The request id's layer and the ASGI types live in asgi_ids; named here as they were.
__all__ = [
    "SCOPE_REQUEST_ID",
    "ASGIApp",
    "Capture",
    "Disconnected",
    "IdempotencyMiddleware",
    "Message",
    "Receive",
    "RequestIdMiddleware",
    "Scope",
    "Send",
    "bind_request_id",
    "capturable",
    "guard_asgi",
    "incoming",
    "path_bytes",
    "read_body",
    "send_response",
    "with_bound_id",
    "with_request_id",
]


def path_bytes(scope: Scope) -> bytes:
    """The path's exact bytes. ``path`` is decoded text (an undecodable byte already replaced
    by most servers); ``raw_path`` is the path as it arrived, still percent-encoded: its escapes
    decoded, it is the bytes ``path`` was read from."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes):
        return unquote_to_bytes(raw) if b"%" in raw else raw
    return text_bytes(scope.get("path", ""))


def incoming(scope: Scope) -> Incoming:
    """The request of ``scope`` as the core sees it."""
    query = scope.get("query_string", b"")
    return Incoming(
        scope["method"],
        scope.get("path", ""),
        query.decode("latin-1") if query else "",
        Headers.of_bytes(scope.get("headers", ())),
        scope,
        path_bytes(scope),
    )


# -- the idempotency middleware --------------------------------------------------------------
async def guard_asgi(
    opts: HttpOptions,
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    tag: bytes | None = None,
    request: Incoming | None = None,
    bind: bool = False,
) -> None:
    """Run one HTTP request through the idempotency rules; shared with the FastAPI route.

    ``tag``: the request id bound for this request, set on every response that has none.
    ``request``: ``incoming(scope)``, when the caller made it already. ``bind``: bind the
    request id here unless an outer layer did (which set it in the scope): accepted or made,
    set in the scope and the context for the request, and the tag; the middleware binds it
    so, for the request's own coroutine, with no layer of its own around it."""
    if request is None:
        request = incoming(scope)
    request_id = bind_request_id(scope, request.headers) if bind else None
    token = None
    if request_id is not None:
        token, tag = enter_request_id(request_id), request_id.encode("latin-1")
    try:
        await _answer(opts, app, scope, receive, send, tag, request)
    finally:
        if token is not None:
            leave_request_id(token)


async def _answer(
    opts: HttpOptions,
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    tag: bytes | None,
    request: Incoming,
) -> None:
    """``guard_asgi`` with its request id bound: the request passed through, refused, or
    guarded (its body read, the application run through a ``Capture``, the reply sent)."""
    plan = opts.plan(request)
    if plan is None:
        await app(scope, receive, send if tag is None else with_request_id(send, tag))
        return
    if isinstance(plan, StoredResponse):
        await send_response(send, plan, tag)
        return
    try:
        body = await read_body(receive, opts.max_body)
    except Disconnected:
        return
    if body is None:
        await send_response(send, opts.too_large(), tag)
        return
    capturable(scope)
    capture = Capture(app, scope, body, receive, send, opts.max_response, tag)
    reply = await arun(opts, plan, request, body, capture.response)
    if reply.response is not None:
        await send_response(send, reply.response, tag, reply.added)
    if capture.late_error is not None:
        raise capture.late_error


class IdempotencyMiddleware:
    """Idempotency-Key handling for an ASGI app; see docs/http.md for every rule.

    Options (all keyword): ``required``, ``principal`` (request -> tenant/user string),
    ``methods``, ``routes``, ``fingerprint_headers``, ``in_progress`` ("raise" -> 409, "wait"
    -> wait and replay), ``wait_timeout``, ``store_status``, ``max_body``, ``max_response``,
    ``lenient``, ``scope_prefix``, ``problem_base``, ``request_id``.
    """

    # The options are spelled out (not **options) so Starlette's typed add_middleware() can
    # check them; they are HttpOptions' fields, defaults included.
    def __init__(
        self,
        app: ASGIApp,
        guard: Guard,
        *,
        required: bool = False,
        principal: Principal | None = None,
        methods: Collection[str] = DEFAULT_METHODS,
        routes: Sequence[Route] = (),
        fingerprint_headers: Sequence[str] = (),
        in_progress: str = "raise",
        wait_timeout: float | None = None,
        store_status: Callable[[int], bool] = storable_status,
        max_body: int = MiB,
        max_response: int = MiB,
        lenient: bool = True,
        scope_prefix: str = "http",
        problem_base: str = PROBLEM_BASE,
        request_id: bool = True,
    ) -> None:
        self.app = app
        self.options = HttpOptions(
            guard=guard,
            required=required,
            principal=principal,
            methods=methods,
            routes=routes,
            fingerprint_headers=fingerprint_headers,
            in_progress=in_progress,
            wait_timeout=wait_timeout,
            store_status=store_status,
            max_body=max_body,
            max_response=max_response,
            lenient=lenient,
            scope_prefix=scope_prefix,
            problem_base=problem_base,
            request_id=request_id,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        opts = self.options
        await guard_asgi(opts, self.app, scope, receive, send, bind=opts.request_id)
