"""The dashboard as an ASGI application (Starlette's request parsing and responses): mount it
under any prefix of a Starlette or FastAPI application; its links follow ``root_path``."""

from __future__ import annotations

from typing import Any

from mideng.core import effects
from mideng.dashboard.exchange import Request
from mideng.dashboard.routes import handle
from mideng.dashboard.settings import Settings
from mideng.dashboard.wiring import Wired


class DashboardApp:
    """``await app(scope, receive, send)``: one request through ``routes.handle``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.wired = Wired(settings)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.requests import Request as StarletteRequest
        from starlette.responses import Response

        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        incoming = StarletteRequest(scope, receive)
        root = scope.get("root_path", "")
        path = scope["path"]
        if root and path.startswith(root):
            path = path[len(root) :]
        form: dict[str, str] = {}
        if incoming.method == "POST":
            form = await _form(incoming)
        request = Request(
            incoming.method,
            path or "/",
            root,
            dict(incoming.query_params),
            form,
            dict(incoming.headers),
            dict(incoming.cookies),
            scope.get("scheme", "http"),
        )
        reply = await effects.arun(handle(self.settings, self.wired.dashboard, request))
        response = Response(reply.body, reply.status)
        response.raw_headers = [(k.encode(), v.encode()) for k, v in reply.all_headers()]
        response.raw_headers.append((b"content-length", str(len(reply.body)).encode()))
        await response(scope, receive, send)

    async def aclose(self) -> None:
        """Close the outbox's connections (a server's lifespan shutdown does this)."""
        await self.wired.aclose()

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


#: The largest form body read: an action's form is a few fields.
FORM_MAX = 64 * 1024


async def _form(incoming: Any) -> dict[str, str]:
    """An url-encoded form's fields (first value of each); anything else reads as empty,
    which the CSRF check then refuses."""
    from urllib.parse import parse_qsl

    kind = incoming.headers.get("content-type", "").split(";")[0].strip()
    if kind != "application/x-www-form-urlencoded":
        return {}
    body = b""
    async for chunk in incoming.stream():
        body += chunk
        if len(body) > FORM_MAX:
            return {}
    fields: dict[str, str] = {}
    for name, value in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
        fields.setdefault(name, value)
    return fields


def app(store: Any, db: Any = None, **options: Any) -> DashboardApp:
    """The dashboard over ``store`` (a URL or a store) and the outbox in ``db`` (a URL or an
    engine; None: no outbox pages); ``options``: ``Settings``' other fields."""
    return DashboardApp(Settings(store, db, **options))
