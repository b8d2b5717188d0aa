"""Django: the Idempotency-Key middleware, configured from settings, plus view decorators.

    MIDDLEWARE = [..., "mideng.http.django.IdempotencyMiddleware", ...]
    MIDENG_HTTP = {
        "guard": "myproject.idempotency.guard",   # dotted path to a mideng.Guard, or
        "store": "redis://127.0.0.1:6379/0",      # a store URL (a Guard is made for it)
        "required": False,
        "principal": "myproject.idempotency.tenant_of",  # dotted path or callable
        # any other option of the ASGI/WSGI middleware: methods, routes, max_body, ...
    }

Put it after the authentication middleware when the principal reads ``request.user``. The
middleware is synchronous; Django adapts it under ASGI. ``require_token``, ``token_view`` and
``debounce`` guard single views.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast
from urllib.parse import unquote_to_bytes, urlsplit

from django.conf import settings
from django.core.exceptions import BadRequest, ImproperlyConfigured, RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.http.request import RawPostDataException, UnreadablePostError
from django.http.response import HttpResponseBase, StreamingHttpResponse
from django.utils.module_loading import import_string

from mideng.context import enter_request_id, leave_request_id
from mideng.guard import Guard
from mideng.http import asgi, wsgi
from mideng.http.core import REQUEST_ID_HEADER, HttpOptions, Incoming, StoredResponse
from mideng.http.exchange import Captured, run
from mideng.http.headers import Headers
from mideng.http.resubmit import BizKey, TokenGate
from mideng.http.views import SyncViews, held
from mideng.http.wsgi import bind_request_id
from mideng.tokens import TokenService

SETTING = "MIDENG_HTTP"
_DOTTED = ("principal", "store_status")
View = Callable[..., HttpResponseBase]


def _path_bytes(request: HttpRequest) -> bytes | None:
    """The path's exact bytes, or None where Django alone had them.

    Django percent-encodes what UTF-8 can't decode, so its path for the byte 0xFF and for a
    literal "%FF" is the same, and under WSGI it writes that text over PATH_INFO before any
    middleware runs. The request line keeps the bytes; most servers pass it on as
    REQUEST_URI (gunicorn as RAW_URI).
    """
    scope = getattr(request, "scope", None)  # an ASGIRequest's
    if scope is not None:
        return asgi.path_bytes(scope)
    target = request.META.get("REQUEST_URI") or request.META.get("RAW_URI")
    if not isinstance(target, str) or not target:
        return None
    raw = wsgi.wsgi_bytes(target).partition(b"?")[0]
    if not raw.startswith(b"/"):  # absolute-form: scheme://authority/path
        raw = urlsplit(raw).path
    return unquote_to_bytes(raw)


_UNPREFIXED = frozenset({"CONTENT_TYPE", "CONTENT_LENGTH"})


def header_fields(meta: dict[str, Any]) -> dict[str, str]:
    """``request.headers`` as (lower-case name: value), read from META as Django reads it
    (HTTP_* and the two unprefixed fields; of two spellings of one name the later wins),
    without building Django's mapping and parsing each name through a method call."""
    found: dict[str, str] = {}
    for key, value in meta.items():
        if key[:5] == "HTTP_":
            name = key[5:]
        elif key in _UNPREFIXED:
            name = key
        else:
            continue
        if name:
            found[name.replace("_", "-").title().lower()] = value
    return found


def incoming(request: HttpRequest) -> Incoming:
    return Incoming(
        request.method or "GET",
        request.path,
        request.META.get("QUERY_STRING", ""),
        Headers.of_fields(header_fields(request.META)),
        request,
        _path_bytes(request),
    )


def to_django(response: StoredResponse) -> HttpResponse:
    merged: dict[str, str] = {}
    for name, value in response.headers:  # a repeated field joins, in order
        merged[name] = f"{merged[name]}, {value}" if name in merged else value
    # Handed over whole: Django sets them as it builds the response, rather than a default
    # content type set, deleted, and each field set again.
    native = HttpResponse(response.body, status=response.status, headers=merged)
    if "content-type" not in merged:
        del native["Content-Type"]  # only what was stored, not Django's default
    return native


def options_from_settings() -> HttpOptions:
    config = dict(getattr(settings, SETTING, None) or {})
    guard = config.pop("guard", None)
    store = config.pop("store", None)
    if isinstance(guard, str):
        guard = import_string(guard)
    if guard is None and store is not None:
        guard = Guard(store)
    if not isinstance(guard, Guard):
        raise ImproperlyConfigured(
            f"settings.{SETTING} needs 'guard' (a mideng.Guard or its "
            "dotted path) or 'store' (a store URL)"
        )
    for name in _DOTTED:
        if isinstance(config.get(name), str):
            config[name] = import_string(config[name])
    return HttpOptions.build(guard, config)


def capture(response: HttpResponseBase, limit: int) -> Captured:
    """The response as stored bytes, or None for a stream that can't (or shouldn't) be held."""
    headers = tuple((name.lower(), value) for name, value in response.items())
    if not isinstance(response, StreamingHttpResponse):
        content = cast(HttpResponse, response).content
        return StoredResponse(response.status_code, headers, content)
    if response.is_async or response.get("Content-Type", "").startswith("text/event-stream"):
        return None
    # is_async was ruled out: the content is an iterator of bytes.
    body = held(cast(Iterator[bytes], response.streaming_content), limit)
    response.streaming_content = body
    if not isinstance(body, list):
        return None
    return StoredResponse(response.status_code, headers, b"".join(body))


def bad_body(exc: Exception, meta: dict[str, Any]) -> BadRequest | None:
    """Django's 400 for ``exc``, raised reading a request body, when the client caused it;
    None when it did not (``exc`` stands)."""
    if isinstance(exc, UnreadablePostError):  # the client went away mid-body
        return BadRequest("the request body could not be read")
    try:
        # Django reads the length with int() before the body, and a server may pass on what
        # the client sent (runserver does).
        int(meta.get("CONTENT_LENGTH") or 0)
    except (TypeError, ValueError):
        return BadRequest("the request's Content-Length is not a number")
    return None


class IdempotencyMiddleware:
    """Idempotency-Key handling for Django, options from ``settings.MIDENG_HTTP``."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        self.options = options_from_settings()

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        request_id = bind_request_id(request.META) if self.options.request_id else None
        if request_id is None:
            return self._guarded(request)
        token = enter_request_id(request_id)  # request_id_scope without its generator
        try:
            response = self._guarded(request)
        finally:
            leave_request_id(token)
        if REQUEST_ID_HEADER not in response:
            response[REQUEST_ID_HEADER] = request_id
        return response

    def _guarded(self, request: HttpRequest) -> HttpResponseBase:
        opts = self.options
        view = incoming(request)
        plan = opts.plan(view)
        if plan is None:
            return self.get_response(request)
        if isinstance(plan, StoredResponse):
            return to_django(plan)
        try:
            body = request.body
        except RequestDataTooBig:
            body = None
        except RawPostDataException as exc:
            # An earlier middleware read request.POST or request.FILES from the stream: the body
            # is gone, so nothing can be fingerprinted. Said plainly rather than Django's own
            # "You cannot access body after reading from request's data stream".
            raise ImproperlyConfigured(
                "mideng's IdempotencyMiddleware must come before any middleware that reads "
                "request.POST or request.FILES (the request body was already consumed)"
            ) from exc
        except (UnreadablePostError, ValueError) as exc:
            refusal = bad_body(exc, request.META)  # nothing was claimed: a retry starts afresh
            if refusal is None:
                raise
            raise refusal from exc
        if body is None or len(body) > opts.max_body:
            return to_django(opts.too_large())
        produced: list[HttpResponseBase] = []

        def downstream() -> Captured:
            response = self.get_response(request)
            produced.append(response)
            return capture(response, opts.max_response)

        reply = run(opts, plan, view, body, downstream)
        if reply.own and produced:
            for name, value in reply.added:
                produced[-1][name] = value
            return produced[-1]
        assert reply.response is not None
        return to_django(reply.response)


# -- single views: anti-resubmit tokens and debounce --------------------------------------------
def token_view(service: TokenService, biz_key: BizKey) -> View:
    """A view that issues a token: ``path("token/", token_view(tokens, key_of))`` (POST)."""
    gate = TokenGate(service, biz_key)

    def issue(request: HttpRequest) -> HttpResponseBase:
        return to_django(gate.issued(incoming(request)))

    return issue


class _Views(SyncViews[HttpResponseBase]):
    """A Django view's request is its first argument."""

    def incoming(self, args: tuple[Any, ...]) -> Incoming:
        return incoming(args[0])

    def route(self, args: tuple[Any, ...]) -> str | None:
        match = args[0].resolver_match
        return match.route if match else None

    def form(self, args: tuple[Any, ...]) -> Mapping[str, Any] | None:
        request: HttpRequest = args[0]
        try:
            return request.POST if request.method == "POST" else None
        except (UnreadablePostError, ValueError) as exc:
            refusal = bad_body(exc, request.META)  # no token was consumed yet
            if refusal is None:
                raise
            raise refusal from exc

    def native(self, response: StoredResponse) -> HttpResponseBase:
        return to_django(response)

    def respond(self, returned: HttpResponseBase) -> HttpResponseBase:
        return returned


_VIEWS = _Views()
require_token = _VIEWS.require_token
debounce = _VIEWS.debounce
