"""Flask: per-view helpers over the shared HTTP core.

For the whole application use the WSGI middleware instead:
``app.wsgi_app = mideng.http.wsgi.IdempotencyMiddleware(app.wsgi_app, guard=guard)``.
For one view:

    @app.post("/orders")
    @idempotent(guard, required=True)
    def create_order(): ...

The view's return value is made into a response and that is stored. An exception raised by the
view (``abort(409)`` included) releases the key like a 5xx does; the WSGI middleware, which sees
Flask's finished error page, stores a 4xx instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from flask import Response, current_app, request

from mideng.context import request_id_scope
from mideng.guard import Guard
from mideng.http.core import REQUEST_ID_HEADER, HttpOptions, Incoming, RecordKey, StoredResponse
from mideng.http.exchange import Captured, run
from mideng.http.headers import Headers
from mideng.http.resubmit import BizKey, TokenGate
from mideng.http.views import SyncViews, held
from mideng.http.wsgi import bind_request_id, wsgi_bytes
from mideng.tokens import TokenService

View = Callable[..., Any]


def incoming() -> Incoming:
    """The current Flask request as the core sees it (``raw`` is the request object)."""
    return Incoming(
        request.method,
        request.path,
        request.query_string.decode("latin-1"),
        Headers(request.headers.items()),
        request,
        # Werkzeug's path replaced what UTF-8 can't decode; the fingerprint needs the bytes.
        wsgi_bytes(request.environ.get("PATH_INFO", "")),
    )


def to_flask(response: StoredResponse) -> Response:
    native = Response(response.body, status=response.status)
    # Only what was stored (its Content-Length included), not the defaults set beside it.
    del native.headers["Content-Type"]
    del native.headers["Content-Length"]
    for name, value in response.headers:
        native.headers.add(name, value)
    return native


def capture(response: Response, limit: int) -> Captured:
    """The response as stored bytes, or None for a stream that can't (or shouldn't) be held."""
    headers = tuple((name.lower(), value) for name, value in response.headers.items())
    if not response.is_streamed:
        return StoredResponse(response.status_code, headers, response.get_data())
    if response.mimetype == "text/event-stream":
        return None
    body = held(response.iter_encoded(), limit)
    if not isinstance(body, list):
        response.response = body
        return None
    response.set_data(b"".join(body))
    return StoredResponse(response.status_code, headers, response.get_data())


def _guard_view(opts: HttpOptions, call: Callable[[], Any]) -> Response:
    view = incoming()
    plan = opts.plan(view)
    if plan is None:
        return current_app.make_response(call())
    if isinstance(plan, StoredResponse):
        return to_flask(plan)
    body = request.get_data(cache=True)
    if len(body) > opts.max_body:
        return to_flask(opts.too_large())
    return _run_view(opts, plan, view, body, call)


def _run_view(
    opts: HttpOptions, plan: RecordKey, view: Incoming, body: bytes, call: Callable[[], Any]
) -> Response:
    produced: list[Response] = []

    def downstream() -> Captured:
        response = current_app.make_response(call())
        produced.append(response)
        return capture(response, opts.max_response)

    reply = run(opts, plan, view, body, downstream)
    if reply.own and produced:
        for name, value in reply.added:
            produced[-1].headers[name] = value
        return produced[-1]
    assert reply.response is not None
    return to_flask(reply.response)


def idempotent(guard: Guard, **options: Any) -> Callable[[View], View]:
    """Guard one view with the Idempotency-Key rules; options as for the middleware."""
    opts = HttpOptions.build(guard, options)

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Response:
            request_id = bind_request_id(request.environ) if opts.request_id else None
            if request_id is None:
                return _guard_view(opts, lambda: view(*args, **kwargs))
            with request_id_scope(request_id):
                response = _guard_view(opts, lambda: view(*args, **kwargs))
            response.headers.setdefault(REQUEST_ID_HEADER, request_id)
            return response

        return guarded

    return decorate


# -- anti-resubmit tokens and debounce -----------------------------------------------------------
def token_view(service: TokenService, biz_key: BizKey) -> View:
    """``app.add_url_rule("/token", view_func=token_view(tokens, key_of), methods=["POST"])``
    (pass ``endpoint=`` when there is more than one)."""
    gate = TokenGate(service, biz_key)

    def issue_token() -> Response:
        return to_flask(gate.issued(incoming()))

    return issue_token


class _Views(SyncViews[Any]):
    """A Flask view reads its request from the context; what it returns is made a response."""

    def incoming(self, args: tuple[Any, ...]) -> Incoming:
        return incoming()

    def route(self, args: tuple[Any, ...]) -> str | None:
        rule = request.url_rule
        return rule.rule if rule is not None else None

    def form(self, args: tuple[Any, ...]) -> Mapping[str, Any] | None:
        return request.form

    def native(self, response: StoredResponse) -> Response:
        return to_flask(response)

    def respond(self, returned: Any) -> Response:
        return current_app.make_response(returned)


_VIEWS = _Views()
require_token = _VIEWS.require_token
debounce = _VIEWS.debounce
