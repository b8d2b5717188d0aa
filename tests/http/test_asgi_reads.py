"""What the ASGI middleware reads agrees with the framework-free core: the plan read from the
request's byte headers as from the same headers in text, the stored fingerprint
(``HttpOptions.digest``), the HTTP policy as the Guard's scopes and defaults change, and the
request ids it makes (``new_request_id``)."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest

from mideng import Guard
from mideng.http import asgi
from mideng.http.core import HttpOptions, Incoming, StoredResponse
from mideng.http.headers import Headers
from mideng.http.request_id import IDS, new_request_id
from mideng.stores.memory import MemoryStore

Raw = list[tuple[bytes, bytes]]


def _scope(headers: Raw, path: str = "/o", raw_path: bytes = b"/o", query: bytes = b"") -> Any:
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": raw_path,
        "query_string": query,
        "headers": headers,
    }


def _as_text(scope: Any) -> Incoming:
    """The request of ``scope`` with text headers: what every Headers reads through ``get``."""
    pairs = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]]
    query = scope["query_string"].decode("latin-1")
    return Incoming(scope["method"], scope["path"], query, Headers(pairs), None, scope["raw_path"])


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, StoredResponse) and isinstance(b, StoredResponse):
        return (a.status, a.headers, a.body) == (b.status, b.headers, b.body)
    return bool(a == b)


@pytest.mark.parametrize("required", [False, True])
def test_the_plan_reads_byte_headers_as_headers_get_does(required: bool) -> None:
    opts = HttpOptions(guard=Guard(MemoryStore()), required=required, max_body=10)
    cases: list[Raw] = [
        [(b"idempotency-key", b'"k-1"')],
        [(b"idempotency-key", b"bare-key")],  # lenient
        [(b"idempotency-key", b'"a", "b"')],  # malformed
        [(b"idempotency-key", b'"k"'), (b"content-length", b"11")],  # declared too large
        [(b"idempotency-key", b'"k"'), (b"content-length", b"10")],
        [(b"idempotency-key", b'"k"'), (b"content-length", b"\xa011")],  # garbled
        [(b"idempotency-key", b'"k\xe9"')],  # not an sf-string
        [(b"content-type", b"application/json")],  # no key
        [],
    ]
    for raw in cases:
        scope = _scope(raw)
        made = asgi.incoming(scope)
        assert type(made.headers).__name__ == ("_BytesHeaders" if raw else "Headers")
        assert _same(opts.plan(made), opts.plan(_as_text(scope))), raw


class App:
    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await receive()
        self.runs += 1
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def _post(app: Any, scope: Any, body: bytes) -> list[Any]:
    sent: list[Any] = []

    async def receive() -> Any:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


@pytest.mark.parametrize("chosen", [(), ("x-a", "x-absent")])
def test_the_stored_fingerprint_is_the_options_digest(chosen: tuple[str, ...]) -> None:
    guard = Guard(MemoryStore())
    middleware = asgi.IdempotencyMiddleware(App(), guard=guard, fingerprint_headers=chosen)
    requests: list[tuple[Any, bytes]] = [
        (_scope([(b"content-type", b"application/json")]), b'{"b": 1, "a": [2, 3]}'),
        (_scope([(b"content-type", b"text/plain"), (b"x-a", b"1")]), b"plain"),
        (_scope([(b"Content-Type", b"application/json")]), b'{"a": 1}'),  # text headers
        (_scope([(b"content-type", b"application/json; charset=utf-8")]), b"[1, 2]"),
        (_scope([], "/caf\u00e9", b"/caf%C3%A9", b"q=\xe9"), b""),
    ]
    for n, (scope, body) in enumerate(requests):
        scope["headers"].append((b"idempotency-key", f'"fp-{n}"'.encode()))
        expected = middleware.options.digest(_as_text(scope), body)
        _post(middleware, scope, body)
        record = guard.get("http:-", f"fp-{n}")
        assert record is not None
        assert record.fingerprint == expected, n


def test_the_http_policy_follows_the_guards_scopes() -> None:
    guard = Guard(MemoryStore())
    middleware = asgi.IdempotencyMiddleware(App(), guard=guard)

    def retention(key: str) -> bytes:
        sent = _post(middleware, _scope([(b"idempotency-key", key.encode())]), b"{}")
        value: bytes = dict(sent[0]["headers"])[b"idempotency-retention"]
        return value

    assert retention('"p-1"') == str(int(guard.policy("http").ttl or 0)).encode()
    guard.configure_scope("http", ttl=60)
    assert retention('"p-2"') == b"60"
    guard.configure_scope("http", ttl=120)
    assert retention('"p-3"') == b"120"


def test_the_http_policy_follows_the_guards_defaults() -> None:
    guard = Guard(MemoryStore(), ttl=30)
    middleware = asgi.IdempotencyMiddleware(App(), guard=guard)

    def retention(key: str) -> bytes | None:
        sent = _post(middleware, _scope([(b"idempotency-key", key.encode())]), b"{}")
        value: bytes | None = dict(sent[0]["headers"]).get(b"idempotency-retention")
        return value

    assert retention('"d-1"') == b"30"
    guard.defaults = guard.defaults.merged(ttl=90)
    assert retention('"d-2"') == b"90"
    guard.defaults = guard.defaults.merged(ttl=None)
    assert retention('"d-3"') is None  # no ttl: nothing advertised
    guard.configure_scope("http", ttl=45)  # a scope of its own outranks the defaults
    guard.defaults = guard.defaults.merged(ttl=10)
    assert retention('"d-4"') == b"45"


def test_fresh_request_ids_are_version_4_uuids_none_repeated_past_a_batch() -> None:
    ids = [new_request_id() for _ in range(2 * IDS.BATCH + 3)]
    assert len(set(ids)) == len(ids)
    for made in ids:
        as_uuid = uuid.UUID(hex=made)
        assert as_uuid.hex == made
        assert (as_uuid.version, as_uuid.variant) == (4, uuid.RFC_4122)


def test_the_middleware_makes_each_request_a_fresh_id() -> None:
    middleware = asgi.IdempotencyMiddleware(App(), guard=Guard(MemoryStore()))
    seen = set()
    for n in range(5):
        sent = _post(middleware, _scope([(b"idempotency-key", f'"id-{n}"'.encode())]), b"{}")
        made = dict(sent[0]["headers"])[b"x-request-id"].decode()
        assert uuid.UUID(hex=made).version == 4
        seen.add(made)
    assert len(seen) == 5


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_draws_request_ids_of_its_own() -> None:
    IDS.refill()  # a batch the parent has barely started
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        try:
            os.write(write, ",".join(new_request_id() for _ in range(5)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read().split(",")
    os.waitpid(pid, 0)
    parent = [new_request_id() for _ in range(5)]
    assert len(child) == 5
    assert not set(child) & set(parent)
