"""Pure ASGI middleware for Starlette, FastAPI and any ASGI application.

No BaseHTTPMiddleware: each request gets fresh state (a ``_Capture`` and a replayed
``receive``), nothing is shared between requests but the options. A guarded request's body is
read up to ``max_body`` before anything is stored; the application's response is held back
until it is complete, then stored and sent. A response that turns out to be an event stream or
larger than ``max_response`` is passed through as it comes, and its key released.

    app.add_middleware(IdempotencyMiddleware, guard=guard, required=False, principal=None)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from urllib.parse import unquote_to_bytes

from mideng.context import enter_request_id, leave_request_id
from mideng.core.record import blank
from mideng.guard import Guard
from mideng.http.asgi_ids import (
    _REQUEST_ID_BYTES,
    SCOPE_REQUEST_ID,
    ASGIApp,
    Message,
    Receive,
    RequestIdMiddleware,
    Scope,
    Send,
    bind_request_id,
    tagged,
    with_bound_id,
    with_request_id,
)
from mideng.http.asgi_send import send_response
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
from mideng.http.exchange import Captured, arun
from mideng.http.headers import Headers, _BytesHeaders
from mideng.http.identity import text_bytes
from mideng.http.problem import PROBLEM_BASE
from mideng.http.request_id import accept_request_id, new_request_id

_new = object.__new__

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
    # Made field by field (core.record.blank): the dataclass's __init__ is a Python frame, and
    # every request makes one.
    request = blank(Incoming)
    request.method = scope["method"]
    request.path = scope.get("path", "")
    query = scope.get("query_string", b"")
    request.query = query.decode("latin-1") if query else ""
    raw_headers = scope.get("headers", ())
    # Headers.of_bytes(raw_headers), its usual case inline: one lower-case name per field.
    joined = dict(raw_headers) if type(raw_headers) is list else None
    if joined is not None and len(joined) == len(raw_headers) and b"".join(joined).islower():
        headers = _new(_BytesHeaders)
        headers._raw, headers._bytes = raw_headers, joined
        request.headers = headers
    else:
        request.headers = Headers.of_bytes(raw_headers)
    request.raw = scope
    raw = scope.get("raw_path")
    # path_bytes(scope), its usual case (a path without escapes) inline
    request.path_bytes = raw if type(raw) is bytes and b"%" not in raw else path_bytes(scope)
    return request


# -- capturing the application's response ----------------------------------------------------
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


# Each response field name's bytes as Capture stores it (decoded, lower case).
_LOWER: dict[bytes, str] = {}
_LOWER_KEPT = 256


class Capture:
    """Runs the application and holds its response back until it is complete.

    The application reads the body already read (then the client's own messages). An event
    stream, or a body past ``limit`` bytes, switches to passing the response through as it
    comes; the call then returns None so the key is released rather than half-stored. Made
    for every guarded request, so it is one object: what the application needs is made only
    when it runs (a replay never does).
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
        self.late_error: Exception | None = None

    async def __call__(self) -> Captured:
        try:
            await self.app(self.scope, self.receive, self.send)
        except Exception as exc:
            if not self.complete or self.passing:
                raise
            # Raised after a complete response (a failing background task): the response
            # stands, as it would without the capture; the error is raised once it is sent.
            self.late_error = exc
        if self.passing:
            return None
        if self.start is None or not self.complete:
            raise RuntimeError("the application returned without a complete response")
        chunks = self.chunks
        captured = blank(StoredResponse)  # its fields set here: no __init__ frame per request
        captured.status, captured.headers = int(self.start["status"]), self.headers
        captured.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return captured

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
        assert self.start is not None
        self.passing = True
        await self.upstream(self.start if self.tag is None else tagged(self.start, self.tag))
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


# -- the idempotency middleware --------------------------------------------------------------
async def guard_asgi(
    opts: HttpOptions,
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    tag: bytes | None = None,
    request: Incoming | None = None,
) -> None:
    """Run one HTTP request through the idempotency rules; shared with the FastAPI route.

    ``tag``: the request id bound for this request, set on every response that has none.
    ``request``: ``incoming(scope)``, when the caller made it already."""
    if request is None:
        request = incoming(scope)
    plan = opts.plan(request)
    if plan is None:
        await app(scope, receive, send if tag is None else with_request_id(send, tag))
        return
    if isinstance(plan, StoredResponse):
        await send_response(send, plan, tag)
        return
    message = await receive()  # read_body, its usual case (the whole body in one message) inline
    body: bytes | None = message.get("body", b"")
    if message.get("more_body", False) or message["type"] != "http.request":
        try:
            body = await read_body(receive, opts.max_body, message)
        except Disconnected:
            return
    if body is None or len(body) > opts.max_body:
        await send_response(send, opts.too_large(), tag)
        return
    if scope.get("extensions"):
        capturable(scope)
    # Capture(app, scope, body, receive, send, opts.max_response, tag), its fields set here:
    # no class call and __init__ frame per request (tests compare the two).
    capture = _new(Capture)
    capture.app, capture.scope, capture.body, capture.downstream = app, scope, body, receive
    capture.upstream, capture.limit, capture.tag = send, opts.max_response, tag
    capture.start, capture.headers, capture.chunks, capture.size = None, (), [], 0
    capture.complete = capture.passing = False
    capture.late_error = None
    reply = await arun(opts, plan, request, body, capture)
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
        request = incoming(scope)
        if not self.options.request_id or SCOPE_REQUEST_ID in scope:  # an outer layer bound it
            await guard_asgi(self.options, self.app, scope, receive, send, None, request)
            return
        headers = request.headers
        if type(headers) is _BytesHeaders:  # incoming's usual headers: first(), inline
            raw = headers._bytes.get(_REQUEST_ID_BYTES)
            sent = None if raw is None else raw.decode("latin-1")
        else:
            sent = headers.first(REQUEST_ID_HEADER)
        request_id = scope[SCOPE_REQUEST_ID] = (
            new_request_id() if sent is None else accept_request_id(sent)
        )
        token = enter_request_id(request_id)
        try:
            tag = request_id.encode("latin-1")
            await guard_asgi(self.options, self.app, scope, receive, send, tag, request)
        finally:
            leave_request_id(token)
