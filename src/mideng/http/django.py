"""Django: the Idempotency-Key middleware, configured from settings, plus view decorators.

    MIDDLEWARE = [..., "mideng.http.django.IdempotencyMiddleware", ...]
    MIDENG_HTTP = {
        "guard": "myproject.idempotency.guard",   # dotted path to a mideng.Guard (or to a
                                                  # function returning one, as
                                                  # "mideng.contrib.django.guard"), or
        "store": "redis://127.0.0.1:6379/0",      # a store URL (a Guard is made for it)
        "required": False,
        "principal": "myproject.idempotency.tenant_of",  # dotted path or callable
        # any other option of the ASGI/WSGI middleware: methods, routes, max_body, ...
    }

Put it after the authentication middleware when the principal reads ``request.user``. The
middleware is synchronous; Django adapts it under ASGI. ``idempotent_view`` guards one view
(function, async, or a class-based or DRF view's method through ``method_decorator``) with the
same exchange; ``require_token``, ``token_view`` and ``debounce`` guard single views otherwise.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar, cast, overload
from urllib.parse import unquote_to_bytes, urlsplit

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.core.exceptions import BadRequest, ImproperlyConfigured, RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.http.request import RawPostDataException, UnreadablePostError
from django.http.response import HttpResponseBase, StreamingHttpResponse
from django.utils.module_loading import import_string

from mideng.context import enter_request_id, leave_request_id
from mideng.guard import Guard
from mideng.http import asgi, wsgi
from mideng.http.core import (
    REQUEST_ID_HEADER,
    HttpOptions,
    Incoming,
    RecordKey,
    StoredResponse,
)
from mideng.http.exchange import Captured, Reply, arun, run
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


def options_from_settings(overrides: Mapping[str, Any] | None = None) -> HttpOptions:
    """The options ``settings.MIDENG_HTTP`` names, ``overrides`` put over them."""
    config = {**(getattr(settings, SETTING, None) or {}), **(overrides or {})}
    guard = config.pop("guard", None)
    store = config.pop("store", None)
    if isinstance(guard, str):
        guard = import_string(guard)
    if callable(guard) and not isinstance(guard, Guard):
        guard = guard()  # a function that gives the project's one Guard
    if guard is None and store is not None:
        guard = Guard(store)
    if not isinstance(guard, Guard):
        raise ImproperlyConfigured(
            f"settings.{SETTING} needs 'guard' (a mideng.Guard, a function returning one, "
            "or its dotted path) or 'store' (a store URL)"
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


# -- one guarded request, written once for the middleware and the view decorator -----------------
Respond = Callable[[HttpRequest], HttpResponseBase]
Prepared = tuple[Incoming, RecordKey, bytes]

#: Who reads the request body before mideng does, named when it is gone.
_MIDDLEWARE_READER = "mideng's IdempotencyMiddleware must come before any middleware"


def prepared(
    opts: HttpOptions, request: HttpRequest, reader: str
) -> Prepared | HttpResponseBase | None:
    """The guarded request (as the core sees it, its record and its body), a refusal to send
    now, or None: not guarded, the view runs as it is. ``reader`` says what must not read the
    body first."""
    view = incoming(request)
    plan = opts.plan(view)
    if plan is None or isinstance(plan, StoredResponse):
        return plan if plan is None else to_django(plan)
    try:
        body = request.body
    except RequestDataTooBig:
        body = None
    except RawPostDataException as exc:
        # Something read request.POST or request.FILES from the stream first: the body is gone,
        # so nothing can be fingerprinted. Said plainly rather than Django's own "You cannot
        # access body after reading from request's data stream".
        raise ImproperlyConfigured(
            f"{reader} that reads request.POST or request.FILES "
            "(the request body was already consumed)"
        ) from exc
    except (UnreadablePostError, ValueError) as exc:
        refusal = bad_body(exc, request.META)  # nothing was claimed: a retry starts afresh
        if refusal is None:
            raise
        raise refusal from exc
    if body is None or len(body) > opts.max_body:
        return to_django(opts.too_large())
    return view, plan, body


def answered(reply: Reply, produced: list[HttpResponseBase]) -> HttpResponseBase:
    """What to send for ``reply``: the view's own response when it went out as it came (the
    reply's headers added), else the reply's."""
    if reply.own and produced:
        for name, value in reply.added:
            produced[-1][name] = value
        return produced[-1]
    assert reply.response is not None
    return to_django(reply.response)


class _Produced:
    """The view's responses as the exchange runs it: each kept (the one sent as it came is the
    last) and captured for storing."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.responses: list[HttpResponseBase] = []

    def __call__(self, response: HttpResponseBase) -> Captured:
        self.responses.append(response)
        return capture(response, self.limit)


def guarded(
    opts: HttpOptions, request: HttpRequest, respond: Respond, reader: str
) -> HttpResponseBase:
    """``respond(request)`` under the request's Idempotency-Key: run once, replayed, refused."""
    ready = prepared(opts, request, reader)
    if not isinstance(ready, tuple):
        return respond(request) if ready is None else ready
    view, target, body = ready
    produced = _Produced(opts.max_response)
    reply = run(opts, target, view, body, lambda: produced(respond(request)))
    return answered(reply, produced.responses)


async def aguarded(
    opts: HttpOptions,
    request: HttpRequest,
    respond: Callable[[HttpRequest], Awaitable[HttpResponseBase]],
    reader: str,
) -> HttpResponseBase:
    """``guarded`` for an async view: ``respond`` is awaited, on the running loop."""
    ready = prepared(opts, request, reader)
    if not isinstance(ready, tuple):
        return await respond(request) if ready is None else ready
    view, target, body = ready
    produced = _Produced(opts.max_response)

    async def downstream() -> Captured:
        return produced(await respond(request))

    reply = await arun(opts, target, view, body, downstream)
    return answered(reply, produced.responses)


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
        return guarded(self.options, request, self.get_response, _MIDDLEWARE_READER)


# -- one view under the Idempotency-Key --------------------------------------------------------
_VIEW_READER = "a view under @idempotent_view must be reached before any code"


def user_principal(request: Incoming) -> str | None:
    """The authenticated user's primary key, from ``request.user`` (Django's, or the user DRF
    authenticated); None, the anonymous scope, for an anonymous or absent user."""
    user = getattr(request.raw, "user", None)
    if user is None or not user.is_authenticated:
        return None
    return str(user.pk)


class ViewOptions:
    """One decorated view's options: ``settings.MIDENG_HTTP`` with the view's own over them,
    made on the view's first request (settings may not be configured when it is decorated)."""

    def __init__(self, overrides: Mapping[str, Any]) -> None:
        # The view is the route: the middleware's routes are not its. A view runs after the
        # authentication middleware, so its keys are the user's unless it names a principal.
        self.overrides = {"routes": (), "principal": user_principal, **overrides}
        self.made: HttpOptions | None = None
        self._making = threading.Lock()

    def options(self) -> HttpOptions:
        made = self.made
        if made is None:
            # Made once: options naming a store URL open a Guard on it, which two first
            # requests at once would each open.
            with self._making:
                if self.made is None:
                    self.made = options_from_settings(self.overrides)
                made = self.made
        return made


def rendered(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """``response`` with its bytes, so they can be stored. Django renders a TemplateResponse
    (and DRF's Response) only after the view returns; it is rendered here, a DRF Response once
    its view has given it the renderer, as ``APIView.finalize_response`` does after the method
    (a DRF request names its view in ``parser_context``; mideng imports nothing of DRF)."""
    if getattr(response, "is_rendered", True):
        return response
    context = getattr(request, "parser_context", None)
    finalize = getattr(context.get("view") if context else None, "finalize_response", None)
    if finalize is not None:
        response = finalize(request, response)
    response.render()  # type: ignore[attr-defined]  # is_rendered: a SimpleTemplateResponse
    return response


#: A view, function or method, sync or async.
ViewT = TypeVar("ViewT", bound=Callable[..., Any])


@overload
def idempotent_view(view: ViewT, /) -> ViewT: ...
@overload
def idempotent_view(**options: Any) -> Callable[[ViewT], ViewT]: ...
def idempotent_view(
    view: ViewT | None = None, /, **options: Any
) -> ViewT | Callable[[ViewT], ViewT]:
    """Guard one view with the Idempotency-Key, as ``IdempotencyMiddleware`` guards a request:
    ``@idempotent_view`` or ``@idempotent_view(required=True, ...)``; ``async def`` views too.
    Options are the middleware's (``settings.MIDENG_HTTP``), these over them; ``principal``
    defaults to ``user_principal``. On a class-based view's method (Django's or DRF's), wrap
    it with ``method_decorator``."""

    def decorate(view: ViewT) -> ViewT:
        chosen = ViewOptions(options)
        if iscoroutinefunction(view):

            @functools.wraps(view)
            async def aview(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
                async def respond(request: HttpRequest) -> HttpResponseBase:
                    return rendered(request, await view(request, *args, **kwargs))

                return await aguarded(chosen.options(), request, respond, _VIEW_READER)

            return cast(ViewT, aview)

        @functools.wraps(view)
        def guarded_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            def respond(request: HttpRequest) -> HttpResponseBase:
                return rendered(request, view(request, *args, **kwargs))

            return guarded(chosen.options(), request, respond, _VIEW_READER)

        return cast(ViewT, guarded_view)

    return decorate if view is None else decorate(view)


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
