"""Pure ASGI middleware for Starlette, FastAPI and any ASGI application: the idempotency
middleware and the request id's own.

No BaseHTTPMiddleware: each request gets fresh state (a ``Capture``, which replays the body
read to the application), nothing is shared between requests but the options. A guarded
request's body is read up to ``max_body`` before anything is stored; the application's
response is held back until it is complete, then stored and sent. A response that turns out to
be an event stream or larger than ``max_response`` is passed through as it comes, and its key
released.

    app.add_middleware(IdempotencyMiddleware, guard=guard, required=False, principal=None)

The request id is accepted or made at the edge, bound for the request and set on every
response that has none: by ``RequestIdMiddleware``, or by the idempotency middleware itself
when no outer layer did.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, MutableMapping, Sequence
from typing import Any
from urllib.parse import unquote_to_bytes

from mideng.context import enter_request_id, leave_request_id, request_id_scope
from mideng.guard import Guard
from mideng.http.core import (
    DEFAULT_METHODS,
    REQUEST_ID_HEADER,
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
from mideng.http.request_id import accept_request_id

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
    "messages",
    "path_bytes",
    "read_body",
    "send_response",
    "with_bound_id",
    "with_request_id",
]

# The ASGI types, as the HTTP modules name them.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Set in the scope by whichever layer bound the request id first; inner layers reuse it.
SCOPE_REQUEST_ID = "mideng.request_id"
REQUEST_ID_BYTES = REQUEST_ID_HEADER.encode("latin-1")


# -- the request id ---------------------------------------------------------------------------
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


# -- the request ------------------------------------------------------------------------------
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


class Disconnected(Exception):
    """The client disconnected before its request body arrived."""


async def read_body(receive: Receive, limit: int, message: Message | None = None) -> bytes | None:
    """The whole request body, or None as soon as it exceeds ``limit`` bytes; ``message``: the
    first message, when the caller received it already."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if message is None:
            message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
        message = None


# -- capturing the application's response ----------------------------------------------------
# Each response field name's bytes as Capture stores it (decoded, lower case).
_LOWER: dict[bytes, str] = {}
_LOWER_KEPT = 256


class Capture:
    """Runs the application and holds its response back until it is complete.

    The application reads the body already read (then the client's own messages). An event
    stream, or a body past ``limit`` bytes, switches to passing the response through as it
    comes; ``response`` (which runs it) then gives none to keep, so the key is released rather
    than half-stored. Made for every guarded request, so it is one object: what the application
    needs is made only when it runs (a replay never does).
    """

    __slots__ = (
        "app",
        "body",
        "chunks",
        "complete",
        "downstream",
        "headers",
        "late_error",
        "limit",
        "passing",
        "scope",
        "size",
        "start",
        "tag",
        "upstream",
    )

    def __init__(
        self,
        app: ASGIApp,
        scope: Scope,
        body: bytes | None,
        downstream: Receive,
        upstream: Send,
        limit: int,
        tag: bytes | None = None,
    ) -> None:
        self.app = app
        self.scope = scope
        self.body = body  # None once handed over
        self.downstream = downstream
        self.upstream = upstream
        self.limit = limit
        self.tag = tag  # the request id, for a response passed through
        self.start: Message | None = None
        self.headers: tuple[tuple[str, str], ...] = ()  # the start's, decoded
        self.chunks: list[bytes] = []
        self.size = 0
        self.complete = False
        self.passing = False
        self.late_error: BaseException | None = None

    async def response(self) -> StoredResponse | None:
        """Run the application; its complete response, or None when it was passed through as
        it came (an event stream, or a body past the limit)."""
        try:
            await self.app(self.scope, self.receive, self.send)
        except BaseException as exc:
            if not self.complete or self.passing or self.start is None:
                raise
            # Raised after a complete response (a failing background task, or the request's
            # task cancelled while one runs): the response stands, as it would without the
            # capture, and is stored, since the body has run; the error is raised once the
            # response is sent. Released instead, a cancelled request's retry would run the
            # body a second time.
            self.late_error = exc
        if self.passing:
            return None
        if self.start is None or not self.complete:
            raise RuntimeError("the application returned without a complete response")
        return StoredResponse(int(self.start["status"]), self.headers, b"".join(self.chunks))

    async def receive(self) -> Message:
        body = self.body
        if body is not None:
            self.body = None
            return {"type": "http.request", "body": body, "more_body": False}
        return await self.downstream()

    async def send(self, message: Message) -> None:
        if self.passing:
            await self.upstream(message)
        elif message["type"] == "http.response.start":
            if self.start is not None or self.chunks:
                # A server refuses a second start, or one after body: so does the capture,
                # rather than keep a response the application never validly sent.
                raise RuntimeError("the application sent a response start after a start or body")
            self.start = message
            # Decoded as they will be stored, and looked at for an event stream, in one pass.
            headers = []
            stream = False
            for k, v in message.get("headers", ()):
                # A response's field names are a few, over and over (a bytearray is not kept).
                name = _LOWER.get(k) if type(k) is bytes else None
                if name is None:
                    name = k.decode("latin-1").lower()
                    if type(k) is bytes and len(_LOWER) < _LOWER_KEPT:
                        _LOWER[k] = name
                value = v.decode("latin-1")
                if name == "content-type" and value.lower().startswith("text/event-stream"):
                    stream = True
                headers.append((name, value))
            self.headers = tuple(headers)
            if stream:
                await self._pass_through(None)
        elif message["type"] == "http.response.body" and not self.complete:
            chunk = message.get("body", b"")
            more = bool(message.get("more_body", False))
            self.chunks.append(chunk)
            self.size += len(chunk)
            if self.size > self.limit:
                await self._pass_through(more)
            elif not more:
                self.complete = True

    async def _pass_through(self, more: bool | None) -> None:
        start = self.start
        if start is None:  # an app's broken protocol: the incomplete response's error
            raise RuntimeError("the application sent a response body before its start")
        self.passing = True
        await self.upstream(start if self.tag is None else tagged(start, self.tag))
        if more is not None:
            await self.upstream(
                {"type": "http.response.body", "body": b"".join(self.chunks), "more_body": more}
            )
        self.chunks = []


def capturable(scope: Scope) -> None:
    """Hide response extensions (pathsend, trailers, ...) a capture could not store."""
    extensions = scope.get("extensions")
    if extensions:
        scope["extensions"] = {
            k: v for k, v in extensions.items() if not k.startswith("http.response.")
        }


# -- sending a reply --------------------------------------------------------------------------
Encoded = tuple[frozenset[str], tuple[tuple[bytes, bytes], ...], bool]
_NOTHING_ADDED: Encoded = (frozenset(), (), False)

# Each ``added`` that send_response was given: its names, its fields as bytes, whether it sets
# the request id. A server sends a few (the retention header of each policy); made per reply,
# they were a dict and two encodings per field on every request.
_ADDED: dict[tuple[tuple[str, str], ...], Encoded] = {}
_ADDED_KEPT = 64


async def send_response(
    send: Send,
    response: StoredResponse,
    tag: bytes | None = None,
    added: tuple[tuple[str, str], ...] = (),
) -> None:
    """Send ``response`` with the headers ``added`` set; ``tag``: the request id, set unless
    the response carries one."""
    start, body = messages(response, tag, added)
    await send(start)
    await send(body)


def messages(
    response: StoredResponse, tag: bytes | None = None, added: tuple[tuple[str, str], ...] = ()
) -> tuple[Message, Message]:
    """``send_response``'s two messages: the start and the whole body."""
    names, extra, sets_id = _encoded(added) if added else _NOTHING_ADDED
    if sets_id:
        tag = None
    headers = []
    for n, v in response.headers:
        if n in names:
            continue
        if n == REQUEST_ID_HEADER:
            tag = None
        headers.append((n.encode("latin-1"), v.encode("latin-1")))
    headers += extra
    if tag is not None:
        headers.append((REQUEST_ID_BYTES, tag))
    return (
        {"type": "http.response.start", "status": response.status, "headers": headers},
        {"type": "http.response.body", "body": response.body, "more_body": False},
    )


def _encoded(added: tuple[tuple[str, str], ...]) -> Encoded:
    """The names of ``added``, its fields as bytes, and whether it sets the request id;
    remembered per value (a list is not remembered)."""
    known = _ADDED.get(added) if type(added) is tuple else None
    if known is None:
        known = (
            frozenset([n for n, _ in added]),
            tuple([(n.encode("latin-1"), v.encode("latin-1")) for n, v in added]),
            any(n == REQUEST_ID_HEADER for n, _ in added),
        )
        if type(added) is tuple:
            if len(_ADDED) >= _ADDED_KEPT:
                _ADDED.clear()
            _ADDED[added] = known
    return known


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
