"""FastAPI: a route class for guarding chosen endpoints, dependencies for resubmit tokens and
debounce, and problem+json for their refusals.

For the whole application use the ASGI middleware. For some endpoints only:

    router = APIRouter(route_class=idempotent_route(guard, required=True))

    @router.post("/orders")
    async def create_order(order: Order) -> OrderOut: ...

    app.include_router(router)

The endpoint's response is stored. An exception it raises (``HTTPException`` included) releases
the key like a 5xx does; the middleware, which sees the finished error response, stores a 4xx.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import AsyncExitStack
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.routing import APIRoute

from mideng.guard import Guard
from mideng.http.asgi import Receive, Scope, Send, guard_asgi, with_bound_id
from mideng.http.core import HttpOptions, Incoming, StoredResponse
from mideng.http.debounce import DebounceGate, Debouncer
from mideng.http.headers import Headers
from mideng.http.resubmit import TOKEN_FIELD, TOKEN_HEADER, BizKey, TokenGate
from mideng.tokens import TokenService

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
# Where FastAPI's request handler finds the exit stack of function-scoped dependencies.
_FUNCTION_STACK = "fastapi_function_astack"


def incoming(request: Request) -> Incoming:
    return Incoming(
        request.method,
        request.url.path,
        request.url.query,
        Headers(request.headers.items()),
        request,
    )


def to_starlette(response: StoredResponse) -> Response:
    native = Response(response.body, status_code=response.status)
    native.raw_headers = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in response.headers]
    return native


# -- per-route idempotency -----------------------------------------------------------------------
class _Guarded(Response):
    """Handed to Starlette in place of the endpoint's response: when sent, it runs the endpoint
    under the same ASGI rules as the middleware (body replayed, response captured)."""

    def __init__(self, opts: HttpOptions, handler: Handler) -> None:
        super().__init__()
        self.opts = opts
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
            # FastAPI closed its stack for function-scoped dependencies before sending this
            # response, so the endpoint, run only now, gets a stack of its own, closed as
            # FastAPI closes its: once the endpoint returned, before its response is sent.
            async with AsyncExitStack() as dependencies:
                scope[_FUNCTION_STACK] = dependencies
                response = await self.handler(Request(scope, receive))
            await response(scope, receive, send)

        run = functools.partial(guard_asgi, self.opts, endpoint)
        if self.opts.request_id:
            await with_bound_id(run, scope, receive, send)
        else:
            await run(scope, receive, send)


def idempotent_route(guard: Guard, **options: Any) -> type[APIRoute]:
    """An ``APIRoute`` class guarding its endpoints; options as for the middleware."""
    opts = HttpOptions.build(guard, options)

    class IdempotentRoute(APIRoute):
        def get_route_handler(self) -> Handler:
            handler = super().get_route_handler()

            async def guarded(request: Request) -> Response:
                return _Guarded(opts, handler)

            return guarded

    return IdempotentRoute


# -- problem+json for dependencies ---------------------------------------------------------------
class ProblemException(HTTPException):
    """A refusal from a dependency. With ``install_problem_handler(app)`` it is sent as
    problem+json; without, FastAPI's default handler still sends its status and headers."""

    def __init__(self, response: StoredResponse) -> None:
        headers = {n: v for n, v in response.headers if n in ("retry-after", "cache-control")}
        super().__init__(response.status, json.loads(response.body), headers)
        self.response = response


async def _problem_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProblemException)
    return to_starlette(exc.response)


def install_problem_handler(app: FastAPI) -> None:
    app.add_exception_handler(ProblemException, _problem_handler)


# -- anti-resubmit tokens and debounce -----------------------------------------------------------
async def _form(request: Request) -> Mapping[str, Any] | None:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media == "application/x-www-form-urlencoded":
        return dict(parse_qsl((await request.body()).decode("utf-8", "replace")))
    if media == "multipart/form-data" and importlib.util.find_spec("python_multipart"):
        return await request.form()
    return None


def token_endpoint(
    service: TokenService, biz_key: BizKey
) -> Callable[[Request], Awaitable[Response]]:
    """``app.add_api_route("/token", token_endpoint(tokens, key_of), methods=["POST"])``."""
    gate = TokenGate(service, biz_key)

    async def issue_token(request: Request) -> Response:
        return to_starlette(await gate.aissued(incoming(request)))

    return issue_token


def require_token(
    service: TokenService, biz_key: BizKey, *, header: str = TOKEN_HEADER, field: str = TOKEN_FIELD
) -> Callable[[Request], AsyncIterator[str]]:
    """A dependency: consume the token (header or form field) before the endpoint; restore it
    if the endpoint raises, so the user can submit again."""
    gate = TokenGate(service, biz_key, header, field)

    async def resubmit_token(request: Request) -> AsyncIterator[str]:
        form = None if request.headers.get(header) else await _form(request)
        admitted = await gate.aadmit(incoming(request), form)
        if isinstance(admitted, StoredResponse):
            raise ProblemException(admitted)
        key, token = admitted
        try:
            yield token
        except Exception:
            await gate.arestore(key, token)  # best effort: the endpoint's error stands
            raise

    return resubmit_token


def debounce(
    debouncer: Debouncer,
    principal: Callable[[Incoming], str | None],
    *,
    operation: str | None = None,
) -> Callable[[Request], Awaitable[None]]:
    """A dependency refusing (429) a principal's second call within the window;
    ``operation`` defaults to the method and the route's path template."""
    gate = DebounceGate(debouncer, principal, operation)

    async def debounced(request: Request) -> None:
        route = getattr(request.scope.get("route"), "path", None)
        refusal = await gate.acheck(incoming(request), route)
        if refusal is not None:
            raise ProblemException(refusal)

    return debounced
