"""The per-request helpers that build what goes on the wire: reply headers (ASGI, WSGI), the
headers a replay repeats, status lines, header lookups by name. Each written as one loop for
speed; each checked here against the plain rule it implements."""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Any

import pytest

from mideng.http.asgi import send_response
from mideng.http.core import NOT_REPLAYED, StoredResponse
from mideng.http.exchange import storable_headers
from mideng.http.headers import Headers
from mideng.http.wsgi import respond, status_line

Pairs = tuple[tuple[str, str], ...]
RETENTION = (("idempotency-retention", "60"),)


def sent(response: StoredResponse, tag: bytes | None, added: Pairs) -> list[tuple[bytes, bytes]]:
    messages: list[Any] = []

    async def send(message: Any) -> None:
        messages.append(message)

    asyncio.run(send_response(send, response, tag, added))
    start, body = messages
    assert start["status"] == response.status
    assert body == {"type": "http.response.body", "body": response.body, "more_body": False}
    return list(start["headers"])


def expected(headers: Pairs, tag: bytes | None, added: Pairs) -> list[tuple[bytes, bytes]]:
    """The rule: fields named in ``added`` give way to it; the request id is added last unless
    a field already carries one."""
    names = {n for n, _ in added}
    pairs = [h for h in headers if h[0] not in names] + list(added)
    out = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in pairs]
    if tag is not None and not any(n == "x-request-id" for n, _ in pairs):
        out.append((b"x-request-id", tag))
    return out


CASES: list[Pairs] = [
    (),
    (("content-type", "application/json"),),
    (("content-type", "text/plain"), ("idempotency-retention", "9"), ("x-a", "caf\xe9")),
    (("x-request-id", "app-id"), ("set-cookie", "a=1"), ("set-cookie", "b=2")),
]


@pytest.mark.parametrize("headers", CASES)
@pytest.mark.parametrize("tag", [None, b"rid-1"])
@pytest.mark.parametrize("added", [(), RETENTION, (("x-request-id", "added-id"),)])
def test_asgi_reply_headers(headers: Pairs, tag: bytes | None, added: Pairs) -> None:
    response = StoredResponse(201, headers, b"{}")
    assert sent(response, tag, added) == expected(headers, tag, added)


@pytest.mark.parametrize("headers", CASES)
@pytest.mark.parametrize("added", [(), RETENTION])
def test_wsgi_reply_headers(headers: Pairs, added: Pairs) -> None:
    started: list[Any] = []

    def start_response(status: str, fields: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started.append((status, fields))

    body = respond(start_response, StoredResponse(201, headers, b"x"), added)
    names = {n for n, _ in added}
    assert body == [b"x"]
    assert started == [("201 Created", [h for h in headers if h[0] not in names] + list(added))]


@pytest.mark.parametrize(
    "headers",
    [
        (("content-type", "a"), ("content-length", "3"), ("date", "d"), ("x-a", "1")),
        (("connection", "close, X-Drop"), ("x-drop", "1"), ("x-keep", "2"), ("keep-alive", "5")),
        (("connection", "keep-alive"),),
        (("x-a", "1"), ("x-b", "2")),
    ],
)
def test_storable_headers(headers: Pairs) -> None:
    named = {t.strip().lower() for n, v in headers if n == "connection" for t in v.split(",")}
    rule = tuple(h for h in headers if h[0] not in NOT_REPLAYED and h[0] not in named)
    assert storable_headers(headers) == rule


def test_status_lines() -> None:
    for status in HTTPStatus:
        assert status_line(int(status)) == f"{int(status)} {status.phrase}"
    assert status_line(599) == "599 Unknown"
    assert status_line(299) == "299 Unknown"


def test_byte_headers_lookup_by_any_spelling() -> None:
    headers = Headers.of_bytes([(b"content-type", b"text/plain"), (b"x-caf\xe9", b"v\xff")])
    for _ in range(2):  # the second read of each name comes from the names' table
        assert headers.get("Content-Type") == "text/plain"
        assert headers.get("content-type") == "text/plain"
        assert headers.first("CONTENT-TYPE") == "text/plain"
        assert headers.get("x-caf\xe9") == "v\xff"
        assert headers.get("x-\u20ac", "none") == "none"  # not latin-1: no field has it
        assert headers.get("missing") is None


def test_asgi_reply_headers_added_as_a_list_and_again() -> None:
    """``added`` given as a list (not remembered) or given again (remembered) sends the same."""
    response = StoredResponse(201, (("content-type", "text/plain"), ("x-a", "1")), b"{}")
    added = (("x-a", "2"), ("idempotency-retention", "60"))
    want = expected(response.headers, b"rid", added)
    assert sent(response, b"rid", list(added)) == want  # type: ignore[arg-type]
    assert sent(response, b"rid", added) == want
    assert sent(response, b"rid", added) == want
