"""The ASGI middleware's parts: the request's headers read from the scope's bytes as from the
same fields in text (``incoming``), and the response capture ``guard_asgi`` runs the
application through."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mideng import Guard
from mideng.http import asgi
from mideng.http.asgi import Capture, incoming
from mideng.http.core import HttpOptions
from mideng.http.headers import Headers
from mideng.stores.memory import MemoryStore


def _scope(headers: Any) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/o", "raw_path": b"/o", "headers": headers}


def test_incoming_reads_byte_headers_as_the_same_fields_in_text() -> None:
    cases = [
        [(b"content-type", b"application/json"), (b"idempotency-key", b'"k"')],
        [(b"Content-Type", b"text/plain"), (b"x-a", b"1")],  # an upper-case name
        [(b"x-a", b"1"), (b"x-a", b"2")],  # a repeated field
        ((b"x-a", b"1"),),  # not a list
        [(b"x-caf\xe9", b"v\xff")],  # bytes past ASCII, each read as latin-1
        [],
    ]
    for raw in cases:
        made = incoming(_scope(raw)).headers
        assert type(made) is type(Headers.of_bytes(raw))
        text = Headers([(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw])
        assert list(made) == list(text)
        for name in (
            "content-type",
            "Content-Type",
            "x-a",
            "idempotency-key",
            "x-caf\xe9",
            "absent",
        ):
            assert made.get(name) == text.get(name)
            assert made.first(name) == text.first(name)


def test_the_capture_guard_asgi_runs_holds_the_whole_response(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[Capture] = []

    class Recorded(Capture):
        __slots__ = ()

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            made.append(self)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Any) -> None:
        pass

    opts = HttpOptions(guard=Guard(MemoryStore()))
    scope = _scope([(b"idempotency-key", b'"k-1"')])
    monkeypatch.setattr(asgi, "Capture", Recorded)
    asyncio.run(asgi.guard_asgi(opts, app, scope, receive, send, b"rid"))
    fresh = Capture(app, scope, b"{}", receive, send, opts.max_response, b"rid")
    capture = made[0]
    for name in Capture.__slots__:
        if name not in ("body", "start", "headers", "chunks", "size", "complete"):
            assert getattr(capture, name) == getattr(fresh, name), name
    # What the request changed: the body handed over, the response held back complete.
    assert (capture.body, capture.size, capture.complete) == (None, 2, True)
    assert capture.chunks == [b"{}"]
    assert capture.start is not None
    assert capture.headers == ()


def test_the_capture_decodes_response_field_names_remembered_or_not() -> None:
    """The start's field names, as bytes seen before, new, upper case or a bytearray, are
    stored decoded and lower case, each value as it came."""

    async def scenario() -> tuple[tuple[str, str], ...]:
        async def upstream(message: Any) -> None:
            pass

        capture = Capture(None, {}, None, None, upstream, 100)  # type: ignore[arg-type]
        start = {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"text/plain"),
                (b"X-Caf\xc9", b"V\xe9"),
                (bytearray(b"X-Array"), b"1"),
                (b"content-type", b"again"),
            ],
        }
        await capture.send(start)
        return capture.headers

    for _ in range(2):  # the second time, the names are remembered
        assert asyncio.run(scenario()) == (
            ("content-type", "text/plain"),
            ("x-caf\xe9", "V\xe9"),
            ("x-array", "1"),
            ("content-type", "again"),
        )
