"""Hostile input to the ASGI middleware, driven with hand-built scopes and messages: bodies
cut short or odd, applications that break the protocol, stores that fail at every step, and
duplicates at once. Each answer is a 4xx or 503 (never an exception out of the middleware the
app itself did not raise), and no key's body runs twice."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mideng import Guard
from mideng.errors import StoreUnavailableError
from mideng.http import asgi
from mideng.stores.memory import MemoryStore
from tests.http.asgi_calls import (
    DISCONNECT,
    KEY,
    App,
    Got,
    Message,
    call,
    counting,
    middleware,
    request,
    run,
)
from tests.http.http_apps import FaultyStore

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


# -- request bodies --------------------------------------------------------------------------
def echo(runs: list[int]) -> App:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        runs.append(1)
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"".join(parts)})

    return app


@pytest.mark.parametrize(
    ("messages", "status"),
    [
        ([request(b"")], 201),
        ([{"type": "http.request"}], 201),  # no body field at all
        ([request(b"x" * 10)], 201),
        ([request(b"x" * 11)], 413),
        ([request(b"x", True)] * 9 + [request(b"x")], 201),
        ([request(b"x", True)] * 10 + [request(b"x")], 413),
        ([request(b"", True)] * 50 + [request(b"x" * 10)], 201),
    ],
    ids=["empty", "no-body-field", "max", "max+1", "10-chunks", "11-chunks", "empty-chunks"],
)
def test_bodies_at_the_limit_in_one_or_many_messages(messages: list[Message], status: int) -> None:
    runs: list[int] = []
    app = middleware(echo(runs), max_body=10)
    got = run(call(app, messages=messages))
    assert got.status == status
    body = b"".join(m.get("body", b"") for m in messages)
    assert got.body == (body if status == 201 else got.body)
    assert runs == ([1] if status == 201 else [])
    if status == 201:
        again = run(call(app, messages=[request(body)]))  # the same bytes in one message
        assert again.headers["idempotent-replayed"] == "true"
        assert runs == [1]


@pytest.mark.parametrize(
    "messages",
    [[DISCONNECT], [request(b"x", True), DISCONNECT], [request(b"x", True)] * 3 + [DISCONNECT]],
)
def test_a_client_gone_mid_body_gets_nothing_and_leaves_the_key_unused(
    messages: list[Message],
) -> None:
    runs: list[int] = []
    guard = Guard(MemoryStore())
    app = asgi.IdempotencyMiddleware(echo(runs), guard=guard)
    got = run(call(app, messages=messages))
    assert got.status is None
    assert guard.get("http:-", "k") is None
    assert runs == []
    assert run(call(app, body=b"x")).status == 201  # the key is still free


JSON_BODIES = {
    "invalid": b'{"a":',
    "duplicate keys": b'{"a":1,"a":2}',
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "deep object": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "NaN": b"[NaN]",
    "Infinity": b'{"a":Infinity,"b":-Infinity}',
    "lone surrogate": b'["\\ud800"]',
    "reversed pair": b'["\\udc00\\ud800"]',
    "5000 digits": b"[" + b"1" * 5000 + b"]",
    "overflowing float": b"[1e999]",
    "invalid UTF-8": b'{"a":"\xff"}',
    "UTF-16": '{"a": 1}'.encode("utf-16"),
    "BOM": b'\xef\xbb\xbf{"a":1}',
    "NUL key": b'{"\\u0000":1}',
    "trailing junk": b'{"a":1} x',
}


@pytest.mark.parametrize("body", JSON_BODIES.values(), ids=JSON_BODIES.keys())
@pytest.mark.parametrize("content_type", [b"application/json", b"application/x+json; q=1"])
def test_odd_json_bodies_run_once_replay_and_tell_another_body_apart(
    body: bytes, content_type: bytes
) -> None:
    runs: list[int] = []
    app = middleware(echo(runs), max_body=1 << 20)
    headers = [*KEY, (b"content-type", content_type)]
    first, again = run(call(app, headers, body)), run(call(app, headers, body))
    assert first.status == again.status == 201
    assert again.body == first.body == body
    assert again.headers["idempotent-replayed"] == "true"
    other = run(call(app, headers, body + b" 0"))
    assert (other.status, other.problem()) == (422, "key-reused")
    assert runs == [1]


def test_json_with_duplicate_keys_reads_as_its_last_value() -> None:
    """As Python's json (and so the app) reads it: documented in docs/http.md."""
    runs: list[int] = []
    app = middleware(echo(runs))
    headers = [*KEY, (b"content-type", b"application/json")]
    run(call(app, headers, b'{"a":1,"a":2}'))
    assert run(call(app, headers, b'{ "a": 2 }')).headers["idempotent-replayed"] == "true"
    assert run(call(app, headers, b'{"a":2,"a":1}')).status == 422
    assert runs == [1]


# -- applications that misbehave -------------------------------------------------------------
START: Message = {"type": "http.response.start", "status": 201, "headers": []}
BODY: Message = {"type": "http.response.body", "body": b"ok"}


def scripted(runs: list[int], steps: list[Message], fail_at: int | None = None) -> App:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        runs.append(1)
        for i, message in enumerate(steps):
            if i == fail_at:
                raise RuntimeError("the app failed")
            await send(message)
        if fail_at == len(steps):
            raise RuntimeError("the app failed after its response")

    return app


@pytest.mark.parametrize(
    ("steps", "fail_at"),
    [
        ([START, BODY], 0),  # before the start
        ([START, BODY], 1),  # after the start, before the body
        ([], None),  # returns without sending anything
        ([START], None),  # a start and no body
        ([BODY], None),  # a body without a start
        ([dict(BODY, more_body=True)], None),  # a body left open
    ],
    ids=["before-start", "after-start", "nothing", "start-only", "no-start", "open-body"],
)
def test_an_app_failing_before_its_response_is_complete_releases_the_key(
    steps: list[Message], fail_at: int | None
) -> None:
    """The error is the app's and is raised to the server (its 500), nothing is stored or
    half-sent, and the retry runs again, as documented."""
    runs: list[int] = []
    guard = Guard(MemoryStore())
    app = asgi.IdempotencyMiddleware(scripted(runs, steps, fail_at), guard=guard)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            run(call(app))
    assert guard.get("http:-", "k") is None
    assert runs == [1, 1]


def test_a_body_past_the_limit_before_any_start_is_the_apps_error() -> None:
    """A body over ``max_response`` sent before its start: there is nothing to pass through
    (an assert stopped it; under ``python -O`` an AttributeError). A RuntimeError naming the
    broken protocol, as for every other incomplete response; the key released."""
    runs: list[int] = []
    guard = Guard(MemoryStore())
    big = dict(BODY, body=b"x" * 64, more_body=True)
    app = asgi.IdempotencyMiddleware(scripted(runs, [big], None), guard=guard, max_response=16)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="body before its start"):
            run(call(app))
    assert guard.get("http:-", "k") is None
    assert runs == [1, 1]


def test_an_error_after_a_complete_response_keeps_it() -> None:
    runs: list[int] = []
    app = middleware(scripted(runs, [START, BODY], 2))
    with pytest.raises(RuntimeError):
        run(call(app))
    again = run(call(app))
    assert (again.status, again.body) == (201, b"ok")
    assert runs == [1]


# 307 and 308 ask for the same request at another URI: stored, the followed request (another
# path, the same key) met 422 key-reused (tests/http/test_redirect_not_stored.py).
@pytest.mark.parametrize("status", [500, 502, 503, 408, 425, 429, 307, 308])
def test_retry_later_statuses_reach_the_client_and_are_not_stored(status: int) -> None:
    runs: list[int] = []
    app = middleware(counting(runs, status))
    first, second = run(call(app)), run(call(app))
    assert first.status == second.status == status
    assert "idempotent-replayed" not in second.headers
    assert runs == [1, 1]


def test_response_headers_replay_byte_for_byte() -> None:
    runs: list[int] = []
    raw = [(b"X-Caf\xe9", b"V\xe9\xff"), (b"content-type", b"text/plain; charset=latin-1")]
    app = middleware(scripted(runs, [dict(START, headers=raw), BODY]))
    first, again = run(call(app)), run(call(app))
    assert first.headers["x-caf\xe9"] == again.headers["x-caf\xe9"] == "V\xe9\xff"
    assert again.headers["content-length"] == "2"
    assert runs == [1]


@pytest.mark.parametrize(
    ("parts", "content_type"), [(3, b"text/plain"), (1, b"text/event-stream; charset=utf-8")]
)
def test_a_stream_is_passed_through_whole_and_its_key_released(
    parts: int, content_type: bytes
) -> None:
    runs: list[int] = []
    guard = Guard(MemoryStore())
    app = asgi.IdempotencyMiddleware(
        counting(runs, 200, size=600, parts=parts, content_type=content_type),
        guard=guard,
        max_response=1000,
    )
    got = run(call(app))
    assert (got.status, got.body) == (200, b"x" * 600 * parts)
    assert guard.get("http:-", "k") is None
    assert runs == [1]


# -- concurrency -----------------------------------------------------------------------------
def slow(runs: list[int]) -> App:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        runs.append(1)
        body = (await receive())["body"]
        await asyncio.sleep(0.05)
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": body + b" #%d" % len(runs)})

    return app


@pytest.mark.parametrize("in_progress", ["raise", "wait"])
def test_identical_requests_at_once_run_the_body_once(in_progress: str) -> None:
    runs: list[int] = []
    app = middleware(slow(runs), in_progress=in_progress)

    async def together() -> list[Got]:
        return list(await asyncio.gather(*[call(app, body=b"same") for _ in range(8)]))

    got = run(together())
    assert runs == [1]
    done = [g for g in got if g.status == 201]
    assert {g.body for g in done} == {b"same #1"}
    if in_progress == "wait":
        assert len(done) == 8
    else:
        assert len(done) == 1
        assert all(g.problem() == "key-in-use" for g in got if g.status != 201)


def test_a_different_body_under_a_running_key_is_refused_not_run() -> None:
    runs: list[int] = []
    app = middleware(slow(runs), in_progress="wait")

    async def together() -> list[Got]:
        first = asyncio.ensure_future(call(app, body=b"one"))
        await asyncio.sleep(0.01)
        other = await call(app, body=b"two")
        return [await first, other]

    first, other = run(together())
    assert first.status == 201
    assert (other.status, other.problem()) == (422, "key-reused")
    assert runs == [1]


# -- resubmit tokens -------------------------------------------------------------------------
def test_fastapi_token_that_cannot_be_restored_leaves_the_endpoints_error() -> None:
    import httpx
    from fastapi import Depends, FastAPI

    from mideng.http.fastapi import require_token
    from mideng.tokens import TokenService

    class NoRestore(MemoryStore):
        issued = 0

        def put_token(self, scope: str, key: str, token: str, ttl: float) -> None:
            if self.issued:
                raise StoreUnavailableError("down while restoring (test)")
            self.issued += 1
            super().put_token(scope, key, token, ttl)

    tokens = TokenService(NoRestore(), ttl=60)
    app = FastAPI()

    @app.post("/submit", dependencies=[Depends(require_token(tokens, lambda r: "bob:submit"))])
    async def submit() -> None:
        raise LookupError("the endpoint's own error")

    async def post() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            await c.post("/submit", headers={"x-resubmit-token": tokens.issue("bob:submit")})

    with pytest.raises(LookupError):
        run(post())
