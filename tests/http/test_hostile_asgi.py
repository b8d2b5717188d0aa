"""Hostile input to the ASGI middleware, driven with hand-built scopes and messages: raw header
bytes no HTTP client would send, bodies cut short, applications that break the protocol and
stores that fail at every step. Each answer is a 4xx or 503 (never an exception out of the
middleware the app itself did not raise), and no key's body runs twice."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from mideng import Guard
from mideng.errors import StoreUnavailableError
from mideng.http import asgi
from mideng.stores.memory import MemoryStore
from tests.http.http_apps import FaultyStore

Raw = list[tuple[bytes, bytes]]
Message = dict[str, Any]
KEY: Raw = [(b"idempotency-key", b'"k"')]


def request(body: bytes = b"", more: bool = False) -> Message:
    return {"type": "http.request", "body": body, "more_body": more}


DISCONNECT: Message = {"type": "http.disconnect"}


class Got:
    """What the client saw: the status (None: nothing sent), headers and body."""

    def __init__(self, sent: list[Message]) -> None:
        start = next((m for m in sent if m["type"] == "http.response.start"), None)
        self.status: int | None = None if start is None else start["status"]
        self.headers = {
            bytes(k).decode(): bytes(v).decode("latin-1")
            for k, v in ([] if start is None else start["headers"])
        }
        self.body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")

    def problem(self) -> str:
        assert self.headers["content-type"] == "application/problem+json", self.body
        doc = json.loads(self.body)
        assert doc["status"] == self.status
        return str(doc["type"]).rpartition(":")[2]


async def call(
    app: Any,
    headers: Any = KEY,
    body: bytes = b"{}",
    messages: list[Message] | None = None,
    method: str = "POST",
) -> Got:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "path": "/x",
        "raw_path": b"/x",
        "query_string": b"",
        "headers": headers,
    }
    queue = list(messages) if messages is not None else [request(body)]
    sent: list[Message] = []

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        await asyncio.sleep(3600)  # a client that sent everything and waits
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return Got(sent)


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


App = Callable[[Any, Any, Any], Awaitable[None]]


def counting(
    runs: list[int],
    status: int = 201,
    *,
    size: int = 2,
    parts: int = 1,
    content_type: bytes = b"text/plain",
) -> App:
    """An app that reads its body and answers ``parts`` chunks of ``size`` bytes."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        runs.append(1)
        while (await receive()).get("more_body", False):
            pass
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", content_type)],
            }
        )
        for i in range(parts):
            await send(
                {"type": "http.response.body", "body": b"x" * size, "more_body": i < parts - 1}
            )

    return app


def middleware(app: App, store: Any = None, **options: Any) -> asgi.IdempotencyMiddleware:
    return asgi.IdempotencyMiddleware(app, guard=Guard(store or MemoryStore()), **options)


# -- header bytes ----------------------------------------------------------------------------
def test_a_bytearray_header_name_is_read_like_bytes() -> None:
    """ASGI servers send bytes, but a layer in front may hand on a bytearray (Starlette's own
    header classes accept one). It was an unhashable dict key: every request, guarded or not,
    was a TypeError out of the middleware."""
    runs: list[int] = []
    app = middleware(counting(runs))
    key = [(bytearray(b"idempotency-key"), b'"ba"'), (b"content-type", b"text/plain")]
    first, again = run(call(app, key)), run(call(app, key))
    assert first.status == again.status == 201
    assert again.headers["idempotent-replayed"] == "true"
    unguarded = run(call(app, [(bytearray(b"x-request-id"), b"rid-1")]))
    assert unguarded.status == 201
    assert unguarded.headers["x-request-id"] == "rid-1"
    assert runs == [1, 1]


# -- store faults ----------------------------------------------------------------------------
IO_ERRORS = [ConnectionError("reset by peer"), TimeoutError("read timed out"), OSError("EPIPE")]


@pytest.mark.parametrize("exc", IO_ERRORS, ids=lambda e: type(e).__name__)
def test_a_store_io_error_at_the_claim_is_503_and_nothing_runs(exc: Exception) -> None:
    """A store is meant to raise StoreUnavailableError; one that lets its driver's I/O error
    through (a custom store, a wrapper) made the claim's error a 500. Nothing ran, so it is
    the 503 a dead store gets, and a retry once it is back runs the body once."""
    runs: list[int] = []
    store = FaultyStore(claim=exc)
    store.times = 1
    app = middleware(counting(runs), store)
    refused = run(call(app))
    assert refused.status == 503
    assert refused.problem() == "store-unavailable"
    assert refused.headers["retry-after"] == "1"
    assert runs == []
    first, again = run(call(app)), run(call(app))
    assert first.status == again.status == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert runs == [1]


@pytest.mark.parametrize(
    "exc", [*IO_ERRORS, StoreUnavailableError("down")], ids=lambda e: type(e).__name__
)
def test_a_failed_completion_sends_the_response_and_a_retry_never_reruns(exc: Exception) -> None:
    runs: list[int] = []
    store = FaultyStore(complete=exc)
    app = middleware(counting(runs), store)
    first = run(call(app))
    assert (first.status, first.body) == (201, b"xx")
    retry = run(call(app))  # the claim stays until its lease runs out: in progress, not rerun
    assert retry.status == 409
    assert retry.problem() == "key-in-use"
    assert runs == [1]


@pytest.mark.parametrize(
    "exc", [*IO_ERRORS, StoreUnavailableError("down")], ids=lambda e: type(e).__name__
)
@pytest.mark.parametrize("kind", ["too-big", "event-stream", "5xx"])
def test_a_failed_release_still_lets_the_response_through(exc: Exception, kind: str) -> None:
    """A response that is not stored releases its key. When the release fails with an error
    the store did not wrap, a streamed response had gone out already, and the error escaped
    to the server after it; a 5xx was sent. Each goes out whole; nothing escapes."""
    runs: list[int] = []
    app_of = {
        "too-big": counting(runs, 200, size=600, parts=3),
        "event-stream": counting(runs, 200, content_type=b"text/event-stream"),
        "5xx": counting(runs, 503),
    }
    app = middleware(app_of[kind], FaultyStore(release=exc), max_response=1000)
    got = run(call(app))
    assert got.status == (503 if kind == "5xx" else 200)
    assert got.body == (b"x" * 1800 if kind == "too-big" else b"xx")
    assert runs == [1]
