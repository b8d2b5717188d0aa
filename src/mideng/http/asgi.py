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
from contextvars import Token
from typing import Any
from urllib.parse import unquote_to_bytes

from mideng.context import enter_request_id, leave_request_id
from mideng.core.policy import Policy
from mideng.core.record import blank
from mideng.errors import PayloadMismatchError
from mideng.guard import Guard
from mideng.http.asgi_capture import Capture, Disconnected, capturable, produce, read_body
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
    with_bound_id,
    with_request_id,
)
from mideng.http.asgi_send import messages, send_response
from mideng.http.core import (
    DEFAULT_METHODS,
    REQUEST_ID_HEADER,
    HttpOptions,
    Incoming,
    MiB,
    Principal,
    RecordKey,
    Route,
    StoredResponse,
    storable_status,
)
from mideng.http.exchange import Exchange, count_reply, legacy
from mideng.http.headers import Headers, _BytesHeaders
from mideng.http.identity import NO_HEADERS, http_digest, text_bytes
from mideng.http.problem import PROBLEM_BASE
from mideng.http.request_id import IDS, accept_request_id
from mideng.observability import watch

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
    """The request of ``scope`` as the core sees it."""
    return _begin(scope, None, False, None)[0]


def _begin(
    scope: Scope, request: Incoming | None, bind: bool, tag: bytes | None
) -> tuple[Incoming, Token[str | None] | None, bytes | None]:
    """A guarded request's start, in one frame: ``incoming(scope)`` (unless ``request`` is it)
    and, with ``bind``, the request's id bound: its well-formed X-Request-Id or a fresh one,
    set in the scope (for inner layers) and the context. The request, the token to leave the
    context with (None: nothing bound) and the request id's bytes (``tag`` when not bound)."""
    if request is None:
        # Made field by field (core.record.blank): the dataclass's __init__ is a Python frame,
        # and every request makes one.
        request = blank(Incoming)
        request.method = scope["method"]
        request.path = scope.get("path", "")
        query = scope.get("query_string", b"")
        request.query = query.decode("latin-1") if query else ""
        raw_headers = scope.get("headers", ())
        # Headers.of_bytes(raw_headers), its usual case inline: one lower-case name per field.
        try:
            joined = dict(raw_headers) if type(raw_headers) is list else None
        except TypeError:  # a bytearray name can't be a dict key: of_bytes reads it
            joined = None
        if joined is not None and len(joined) == len(raw_headers) and b"".join(joined).islower():
            made = _new(_BytesHeaders)
            made._raw, made._bytes = raw_headers, joined
            request.headers = made
        else:
            request.headers = Headers.of_bytes(raw_headers)
        request.raw = scope
        raw = scope.get("raw_path")
        # path_bytes(scope), its usual case (a path without escapes) inline
        request.path_bytes = raw if type(raw) is bytes and b"%" not in raw else path_bytes(scope)
    if not bind:
        return request, None, tag
    headers = request.headers
    if type(headers) is _BytesHeaders:  # incoming's usual headers: first(), inline
        sent_raw = headers._bytes.get(_REQUEST_ID_BYTES)
        sent = None if sent_raw is None else sent_raw.decode("latin-1")
    else:
        sent = headers.first(REQUEST_ID_HEADER)
    # accept_request_id(sent), and new_request_id() for none, inline
    request_id = (next(IDS.ids, None) or IDS.refill()) if sent is None else accept_request_id(sent)
    scope[SCOPE_REQUEST_ID] = request_id
    return request, enter_request_id(request_id), request_id.encode("latin-1")


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
    request id here (accepted or made, set in the scope and the context for the request, and
    the tag), as the middleware does when no outer layer bound one: in this coroutine, not one
    of its own around it.

    The awaited drive of ``mideng.http.exchange`` (``run``'s twin) is spelt here, as every
    guarded ASGI request runs it: one coroutine fewer."""
    request, token, tag = _begin(scope, request, bind, tag)
    try:
        plan = opts.plan(request)
        if plan is None:
            await app(scope, receive, send if tag is None else with_request_id(send, tag))
            return
        if isinstance(plan, StoredResponse):
            await send_response(send, plan, tag)
            return
        message = await receive()  # read_body's usual case (the body in one message) inline
        body: bytes | None = message.get("body", b"")
        if message.get("more_body", False) or message["type"] != "http.request":
            try:
                body = await read_body(receive, opts.max_body, message)
            except Disconnected:
                return
        if body is None or len(body) > opts.max_body:
            await send_response(send, opts.too_large(), tag)
            return
        exchange, policy, fingerprint = _exchange(
            opts, app, scope, receive, send, tag, request, body
        )
        capture: Capture = exchange.downstream
        try:
            try:
                call = opts.guard.prepare(plan.scope, plan.key, produce, None, policy)
                call.fingerprint = fingerprint
                stored = await opts.guard.adrive(call, produce, (exchange,), {})
            except PayloadMismatchError as exc:
                stored = await _again(exc, exchange, plan, request, body, policy)
        except Exception as exc:
            reply = exchange.recover_or_raise(exc)
            response, added = reply.response, reply.added
        else:
            if exchange.ran and exchange.original is not None:  # exchange.reply's first run
                response, added = exchange.original, exchange.retention
            else:
                reply = exchange.reply(stored)
                response, added = reply.response, reply.added
        if response is not None:
            if watch.metrics is not None:
                count_reply(response)
            start, rest = messages(response, tag, added)  # send_response, inline
            await send(start)
            await send(rest)
        if capture.late_error is not None:
            raise capture.late_error
    finally:
        if token is not None:
            leave_request_id(token)


async def _again(
    exc: PayloadMismatchError,
    exchange: Exchange,
    plan: RecordKey,
    request: Incoming,
    body: bytes,
    policy: Policy,
) -> Any:
    """A mismatch against a record stored before version 2: the call made again with this
    request's version-1 fingerprint when it is the record's (``exchange.legacy``), else the
    mismatch raised (called in its ``except``)."""
    if (old := legacy(exc, exchange, request, body)) is None:
        raise exc
    guard = exchange.opts.guard
    call = guard.prepare(plan.scope, plan.key, produce, None, policy)
    call.fingerprint = old
    return await guard.adrive(call, produce, (exchange,), {})


def _exchange(
    opts: HttpOptions,
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    tag: bytes | None,
    request: Incoming,
    body: bytes,
) -> tuple[Exchange, Policy, str]:
    """What guard_asgi's drive needs, in one frame: the request's Exchange (its downstream the
    application's Capture), the HTTP policy and the request's fingerprint."""
    if scope.get("extensions"):
        capturable(scope)
    # Capture(app, scope, body, receive, send, opts.max_response, tag), its fields set
    # here: no class call and __init__ frame per request (tests compare the two).
    capture = _new(Capture)
    capture.app, capture.scope, capture.body, capture.downstream = app, scope, body, receive
    capture.upstream, capture.limit, capture.tag = send, opts.max_response, tag
    capture.start, capture.headers, capture.chunks, capture.size = None, (), [], 0
    capture.complete = capture.passing = False
    capture.late_error = None
    # exchange.run's set-up: the Exchange made field by field, the policy looked up
    # (opts.current(), its usual case inline), the fingerprint made (opts.digest, inline).
    exchange = _new(Exchange)
    guard = opts.guard
    base = guard._scopes.get(opts.scope_prefix, guard._defaults)
    current = opts._policy
    _, policy, exchange.retention = (
        current[0] if current and current[0][0] is base else opts.current()
    )
    exchange.opts, exchange.downstream = opts, capture
    exchange.ran, exchange.original, exchange.passed = False, None, False
    headers = request.headers
    if type(headers) is _BytesHeaders:
        raw = headers._bytes.get(b"content-type")
        content_type = None if raw is None else raw.decode("latin-1")
    else:
        content_type = headers.get("content-type")
    fingerprint = http_digest(
        request.method.upper(),
        request.path,
        request.query,
        request.path_bytes,
        content_type,
        body,
        opts.chosen_headers(headers) if opts.fingerprint_headers else NO_HEADERS,
    )
    return exchange, policy, fingerprint


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
        # An outer layer that bound the request id set it in the scope; else it is bound here.
        bind = opts.request_id and SCOPE_REQUEST_ID not in scope
        await guard_asgi(opts, self.app, scope, receive, send, None, None, bind)
