"""Request id through the chain: one id in the response header, the log line, the stored record
and the header of an outgoing call made inside the handler."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import flask
import httpx
import pytest
import requests
from fastapi import FastAPI

from mideng import Guard
from mideng.context import get_request_id, request_id_scope
from mideng.http import asgi, wsgi
from mideng.http.request_id import (
    RequestIdFilter,
    accept_request_id,
    async_httpx_event_hooks,
    from_message_headers,
    httpx_event_hooks,
    instrument_requests,
    message_headers,
    valid_request_id,
)
from mideng.stores.memory import MemoryStore
from tests.http.http_servers import waitress_server


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(request_id)s %(message)s"))
        self.addFilter(RequestIdFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    logger = logging.getLogger("shop")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)


class Outgoing:
    """A downstream service: records the headers of every call it gets."""

    def __init__(self) -> None:
        self.seen: list[httpx.Headers] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request.headers)
        return httpx.Response(200, json={"ok": True})


def check_one_id(
    response: httpx.Response, lines: Lines, outgoing: Outgoing, guard: Guard, key: str
) -> None:
    request_id = response.headers["x-request-id"]
    assert valid_request_id(request_id)
    assert lines.lines == [f"{request_id} charging order 7"]
    assert [h["x-request-id"] for h in outgoing.seen] == [request_id]
    record = guard.get("http:-", key)
    assert record is not None
    assert record.request_id == request_id


@pytest.mark.anyio
@pytest.mark.parametrize("sent_id", [None, "edge-42"])
async def test_asgi_one_id_everywhere(lines: Lines, sent_id: str | None) -> None:
    outgoing = Outgoing()
    app = FastAPI()

    @app.post("/charge")
    async def charge() -> dict[str, Any]:
        logging.getLogger("shop").info("charging order 7")
        async with httpx.AsyncClient(
            transport=httpx.MockTransport(outgoing.handle), event_hooks=async_httpx_event_hooks()
        ) as client:
            await client.post("http://payments/charge")
        return {"ok": True}

    guard = Guard(MemoryStore())
    app.add_middleware(asgi.IdempotencyMiddleware, guard=guard)
    headers = {"idempotency-key": '"k-asgi"'}
    if sent_id:
        headers["x-request-id"] = sent_id
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        response = await c.post("/charge", headers=headers)
    check_one_id(response, lines, outgoing, guard, "k-asgi")
    if sent_id:
        assert response.headers["x-request-id"] == sent_id


def test_wsgi_one_id_everywhere(lines: Lines) -> None:
    outgoing = Outgoing()
    app = flask.Flask(__name__)

    @app.post("/charge")
    def charge() -> dict[str, Any]:
        logging.getLogger("shop").info("charging order 7")
        with httpx.Client(
            transport=httpx.MockTransport(outgoing.handle), event_hooks=httpx_event_hooks()
        ) as client:
            client.post("http://payments/charge")
        return {"ok": True}

    guard = Guard(MemoryStore())
    wrapped = wsgi.IdempotencyMiddleware(app, guard=guard)
    with httpx.Client(transport=httpx.WSGITransport(app=wrapped), base_url="http://t") as c:
        response = c.post("/charge", headers={"idempotency-key": '"k-wsgi"'})
    check_one_id(response, lines, outgoing, guard, "k-wsgi")


def test_requests_adapter_sends_the_current_id() -> None:
    def echo(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [environ.get("HTTP_X_REQUEST_ID", "none").encode()]

    with waitress_server(echo, threads=2) as url, requests.Session() as session:
        instrument_requests(session)
        with request_id_scope("out-1"):
            assert session.get(url).text == "out-1"
        assert session.get(url, headers={"X-Request-Id": "mine"}).text == "mine"
        assert session.get(url).text == "none"


def test_outer_request_id_layer_is_reused_not_doubled() -> None:
    seen: list[str | None] = []

    async def app(scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        seen.append(get_request_id())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    inner = asgi.IdempotencyMiddleware(app, guard=Guard(MemoryStore()))
    outer = asgi.RequestIdMiddleware(inner)
    transport = httpx.ASGITransport(app=outer)

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.post("/", headers={"x-request-id": "once"})

    import anyio

    response = anyio.run(go)
    assert response.headers.get_list("x-request-id") == ["once"]
    assert seen == ["once"]


def test_wsgi_request_id_middleware_generates_and_echoes() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [(get_request_id() or "").encode()]

    with httpx.Client(
        transport=httpx.WSGITransport(app=wsgi.RequestIdMiddleware(app)), base_url="http://t"
    ) as c:
        response = c.get("/", headers={"x-request-id": "bad id with spaces"})
    assert response.text == response.headers["x-request-id"]
    assert valid_request_id(response.text)
    assert response.text != "bad id with spaces"


def test_ids_are_validated() -> None:
    assert accept_request_id("abc-123_x.y:z") == "abc-123_x.y:z"
    for bad in ("", "a b", "x" * 129, "caf\xe9", "new\nline", None):
        replaced = accept_request_id(bad)
        assert replaced != bad
        assert valid_request_id(replaced)


def test_message_headers_carry_the_id_both_ways() -> None:
    assert message_headers() == {}
    with request_id_scope("msg-9"):
        headers = message_headers({"content-type": "application/json"})
    assert headers == {"content-type": "application/json", "x-request-id": "msg-9"}
    assert from_message_headers(headers) == "msg-9"
    assert from_message_headers({"trace_id": b"t-1"}) == "t-1"
    assert from_message_headers({"x-request-id": "bad id"}) is None
    assert from_message_headers(None) is None


def test_filter_outside_a_request_uses_a_dash() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    assert RequestIdFilter().filter(record)
    assert getattr(record, "request_id") == "-"  # noqa: B009 - set by the filter at run time
