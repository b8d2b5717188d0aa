"""The applications the HTTP cases put the middlewares in front of, and how a request reaches
them in-process: a trivial FastAPI endpoint driven through its ASGI interface (no sockets, no
HTTP client), a WSGI application answering the same, and the store calls a request makes.

FastAPI and the ASGI middleware are imported where they are used, so that a counted WSGI or
Django request runs in a process holding only what it uses.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from bench.timing import Batch
from mideng import Guard
from mideng.core.record import ClaimRequest, Ticket
from mideng.stores.base import Store

if TYPE_CHECKING:
    from fastapi import FastAPI

BODY = b'{"item": "book", "qty": 2, "note": "gift wrap"}'
ANSWER = b'{"order":"o-1","status":"created"}'
# What the middleware stores for the endpoint's response, JSON-encoded: the same bytes per call.
STORED = (
    b'{"status":201,"headers":[["content-type","application/json"]],'
    b'"body":"eyJvcmRlciI6Im8tMSIsInN0YXR1cyI6ImNyZWF0ZWQifQ=="}'
)
KeyOf = Callable[[int], bytes | None]


def endpoint_app() -> FastAPI:
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/orders", status_code=201)
    async def create() -> dict[str, Any]:
        return {"order": "o-1", "status": "created"}

    return app


async def call(app: Any, key: bytes | None) -> int:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
    if key is not None:
        headers.append((b"idempotency-key", key))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/orders",
        "raw_path": b"/orders",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("bench", 80),
        "extensions": {},
    }
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


def requests(app: Any, key_of: KeyOf) -> Batch:
    async def batch(numbers: list[int]) -> None:
        for n in numbers:
            status = await call(app, key_of(n))
        assert status == 201, status

    return batch


def middleware_cases(app: Any, label: str) -> tuple[tuple[str, Batch], tuple[str, Batch]]:
    run = uuid.uuid4().hex[:8]
    replay_key = f'"replay-{run}"'.encode()
    return (
        (f"{label}, first request", requests(app, lambda n: f'"{run}-{n}"'.encode())),
        (f"{label}, replay", requests(app, lambda n: replay_key)),
    )


def mideng_app(store: Store) -> Any:
    from mideng.http.asgi import IdempotencyMiddleware

    app = endpoint_app()
    app.add_middleware(IdempotencyMiddleware, guard=Guard(store))
    return app


def store_cases(store: Store, label: str) -> tuple[tuple[str, Batch], ...]:
    """The store calls a request makes, made directly: claim + complete, and a replay's claim."""
    scope, run = "http:bench-own", uuid.uuid4().hex[:8]

    def request(key: str, owner: str) -> ClaimRequest:
        return ClaimRequest(scope, key, owner, 60.0, 86400.0)

    async def firsts(numbers: list[int]) -> None:
        for n in numbers:
            claim = await store.aclaim(request(f"{run}-{n}", f"o-{run}-{n}"))
            await store.acomplete(Ticket.of(claim.record), STORED, "json", 86400.0)

    replayed = f"{run}-replay"

    async def replays(numbers: list[int]) -> None:
        for n in numbers:
            claim = await store.aclaim(request(replayed, f"o-{run}-r{n}"))
            if claim.acquired:  # the warm-up's first: stored for all the others to replay
                await store.acomplete(Ticket.of(claim.record), STORED, "json", 86400.0)
        assert claim.outcome.value == "replay", claim

    bare = endpoint_app()

    async def around(numbers: list[int]) -> None:
        for n in numbers:
            claim = await store.aclaim(request(f"{run}-a{n}", f"o-{run}-a{n}"))
            status = await call(bare, None)
            await store.acomplete(Ticket.of(claim.record), STORED, "json", 86400.0)
        assert status == 201, status

    return (
        (f"{label}: store's own cost, first request", firsts),
        (f"{label}: the bare endpoint between its store's calls", around),
        (f"{label}: store's own cost, replay", replays),
    )


def wsgi_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response(
        "201 Created",
        [("Content-Type", "application/json"), ("Content-Length", str(len(ANSWER)))],
    )
    return [ANSWER]


def wsgi_environ() -> dict[str, Any]:
    """A POST of BODY to /orders, the keys a WSGI server always sets (no idempotency key)."""
    return {
        "REQUEST_METHOD": "POST",
        "SCRIPT_NAME": "",
        "PATH_INFO": "/orders",
        "QUERY_STRING": "",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(BODY)),
        "SERVER_NAME": "bench",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.input": io.BytesIO(BODY),
        "wsgi.url_scheme": "http",
    }
