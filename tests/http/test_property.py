"""Property: whatever headers, keys, methods and bodies arrive, each middleware answers without a
500 and never runs the handler again for a response it stored.

The drivers below call the ASGI and WSGI middleware directly (no HTTP client in between), so
header values can be any bytes a server might pass on.
"""

from __future__ import annotations

import asyncio
import collections
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mideng import Guard
from mideng.http import asgi, wsgi
from mideng.http.core import Incoming
from mideng.stores.memory import MemoryStore


@dataclass(frozen=True)
class Sent:
    method: str
    path: str
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    answer: int


@dataclass(frozen=True)
class Got:
    status: int
    headers: dict[str, str]
    body: bytes


def tenant(request: Incoming) -> str | None:
    return request.headers.get("x-tenant")


# -- strategies ------------------------------------------------------------------------------
header_bytes = st.binary(max_size=60).filter(lambda b: b"\r" not in b and b"\n" not in b)
keys = st.one_of(
    st.none(),
    st.uuids().map(lambda u: f'"{u}"'.encode()),
    st.sampled_from([b'"k1"', b"k1", b'"k1";x=1', b'""', b"?1", b'"a", "b"', b'"unterminated']),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=30).map(
        lambda t: t.encode()
    ),
    header_bytes,
)
methods = st.one_of(
    st.sampled_from(["POST", "PATCH", "PUT", "GET", "DELETE"]),
    st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=8),
)
bodies = st.one_of(
    st.binary(max_size=300),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=4).map(
        lambda d: json.dumps(d).encode()
    ),
)
optional_header = st.one_of(st.none(), header_bytes)
requests = st.builds(
    lambda method, path, key, ctype, tenant_, rid, body, answer: Sent(
        method,
        path,
        tuple(
            (name, value)
            for name, value in (
                (b"idempotency-key", key),
                (b"content-type", ctype),
                (b"x-tenant", tenant_),
                (b"x-request-id", rid),
            )
            if value is not None
        ),
        body,
        answer,
    ),
    methods,
    st.sampled_from(["/a", "/b", "/caf\u00e9", "/\udcff"]),
    keys,
    st.one_of(st.none(), st.just(b"application/json"), header_bytes),
    optional_header,
    optional_header,
    bodies,
    st.sampled_from([200, 201, 404, 502, 503]),
)


# -- the applications under the middleware ---------------------------------------------------
def answer_of(headers: list[tuple[bytes, bytes]]) -> int:
    return int(dict(headers).get(b"x-answer", b"200"))


def asgi_handler(runs: collections.Counter[int]) -> asgi.ASGIApp:
    async def app(scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        run_id = sum(runs.values()) + 1
        runs[run_id] += 1
        payload = json.dumps({"run": run_id, "size": len(body)}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": answer_of(scope["headers"]),
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    return app


async def call_asgi(app: asgi.ASGIApp, sent: Sent) -> Got:
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": sent.method,
        "scheme": "http",
        "path": sent.path,
        "root_path": "",
        "raw_path": sent.path.encode("utf-8", "surrogateescape"),
        "query_string": b"",
        "headers": [*sent.headers, (b"x-answer", str(sent.answer).encode())],
        "client": ("127.0.0.1", 5000),
        "server": ("test", 80),
        "extensions": {},
    }
    inbox: list[dict[str, Any]] = [{"type": "http.request", "body": sent.body, "more_body": False}]
    outbox: list[asgi.Message] = []

    async def receive() -> asgi.Message:
        return inbox.pop(0) if inbox else {"type": "http.disconnect"}

    async def send(message: asgi.Message) -> None:
        outbox.append(message)

    await app(scope, receive, send)
    start = outbox[0]
    return Got(
        start["status"],
        {k.decode("latin-1"): v.decode("latin-1") for k, v in start["headers"]},
        b"".join(m.get("body", b"") for m in outbox[1:]),
    )


def wsgi_handler(runs: collections.Counter[int]) -> Callable[..., Any]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        run_id = sum(runs.values()) + 1
        runs[run_id] += 1
        status = int(environ.get("HTTP_X_ANSWER", "200"))
        start_response(f"{status} X", [("Content-Type", "application/json")])
        return [json.dumps({"run": run_id, "size": len(body)}).encode()]

    return app


def call_wsgi(app: Callable[..., Any], sent: Sent) -> Got:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": sent.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": sent.path.encode("utf-8", "surrogateescape").decode("latin-1"),
        "QUERY_STRING": "",
        "SERVER_NAME": "test",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.input": io.BytesIO(sent.body),
        "wsgi.url_scheme": "http",
        "wsgi.errors": io.StringIO(),
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "wsgi.version": (1, 0),
        "CONTENT_LENGTH": str(len(sent.body)),
        "HTTP_X_ANSWER": str(sent.answer),
    }
    for name, value in sent.headers:
        text = value.decode("latin-1")
        if name == b"content-type":
            environ["CONTENT_TYPE"] = text
        else:
            environ["HTTP_" + name.decode().upper().replace("-", "_")] = text
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started.append((status, headers))
        return lambda data: None

    body = b"".join(app(environ, start_response))
    status, headers = started[-1]
    return Got(int(status.split()[0]), {k.lower(): v for k, v in headers}, body)


# -- the property ----------------------------------------------------------------------------
def check_pair(first: Got, second: Got, runs_between: int) -> None:
    assert first.status != 500
    assert second.status != 500
    if "idempotency-retention" in first.headers and "idempotent-replayed" not in first.headers:
        # Stored: the identical retry replays it and the handler does not run again.
        event("stored and replayed")
        assert runs_between == 0
        assert second.status == first.status
        assert second.body == first.body
        assert second.headers.get("idempotent-replayed") == "true"


OPTIONS: dict[str, Any] = {"principal": tenant, "max_body": 200, "max_response": 4096}
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.lists(requests, min_size=1, max_size=4))
def test_asgi_middleware_never_500s_nor_runs_twice(batch: list[Sent]) -> None:
    runs: collections.Counter[int] = collections.Counter()
    app = asgi.IdempotencyMiddleware(asgi_handler(runs), guard=Guard(MemoryStore()), **OPTIONS)

    async def exercise() -> None:
        for sent in batch:
            first = await call_asgi(app, sent)
            before = sum(runs.values())
            second = await call_asgi(app, sent)
            check_pair(first, second, sum(runs.values()) - before)

    asyncio.run(exercise())


@SETTINGS
@given(st.lists(requests, min_size=1, max_size=4))
def test_wsgi_middleware_never_500s_nor_runs_twice(batch: list[Sent]) -> None:
    runs: collections.Counter[int] = collections.Counter()
    app = wsgi.IdempotencyMiddleware(wsgi_handler(runs), guard=Guard(MemoryStore()), **OPTIONS)
    for sent in batch:
        first = call_wsgi(app, sent)
        before = sum(runs.values())
        second = call_wsgi(app, sent)
        check_pair(first, second, sum(runs.values()) - before)
