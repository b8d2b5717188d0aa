"""What the HTTP layer hands the Guard stays what it was: the same fingerprint for the same
request and the same stored bytes for the same response, made on a shorter path.

The references are the general functions the fast paths stand in for: the Guard's own
fingerprint of the request's payload (``mideng.core.canonical.fingerprint``), ``json.loads`` and
the canonical spelling for a JSON body, and the JSON codec's encoding of the response dataclass
(and its decoding into one, with the type declared) for a stored response. The pinned digests
are what the code before the fast paths computed, so a stored record's fingerprint still
matches the retry that comes after an upgrade.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mideng import Guard
from mideng.core.canonical import fingerprint, plain_canonical_bytes
from mideng.core.codec import JSON_CODEC
from mideng.errors import CodecError
from mideng.http.core import HttpOptions, Incoming, StoredResponse
from mideng.http.exchange import from_stored, replay_of, replayed, storable, stored_form
from mideng.http.headers import Headers
from mideng.http.identity import body_digest
from mideng.stores.memory import MemoryStore


def reference_body_digest(content_type: str | None, body: bytes) -> str:
    """The body digest as json.loads and the canonical spelling give it."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if body and (media == "application/json" or media.endswith("+json")):
        try:
            doc = json.loads(body, parse_constant=lambda name: 1 / 0)
            return "json:" + hashlib.sha256(plain_canonical_bytes(doc)).hexdigest()
        except (ValueError, TypeError, RecursionError, ZeroDivisionError):
            pass
    return "raw:" + hashlib.sha256(body).hexdigest()


def options() -> HttpOptions:
    return HttpOptions(guard=Guard(MemoryStore()), fingerprint_headers=("X-Tenant", "Accept"))


PINNED = [
    (
        Incoming(
            "POST",
            "/orders",
            "a=1",
            Headers([("Content-Type", "application/json"), ("X-Tenant", "t1")]),
            None,
            b"/orders",
        ),
        b'{"b": [1, 2.5, "\\u00e9"], "a": null}',
        "9b697a40f1267098cea7073b8ffbe1d0425c7ec1dcd6da14515781c25a74c3d2",
    ),
    (
        Incoming(
            "patch", "/caf\u00e9", "", Headers([("content-type", "text/plain")]), None, b"/caf\xff"
        ),
        b"\x00\xffraw",
        "80e129ec872d33482ebcdb878afcd732ed82460e1ef5f6e7bcf40521a55812eb",
    ),
    (
        Incoming(
            "POST",
            "/x",
            "q=\udcff",
            Headers([("content-type", "application/merge-patch+json"), ("accept", "a\udcff")]),
        ),
        ' {"k": "v"} '.encode("utf-16"),
        "a65cc47e30278e484ccae9a46d66d30222d9a7a3adf3da20a23a9406fd465899",
    ),
]


@pytest.mark.parametrize(("request_", "body", "digest"), PINNED)
def test_fingerprints_are_those_stored_records_carry(
    request_: Incoming, body: bytes, digest: str
) -> None:
    opts = options()
    assert opts.fingerprint(request_, body) == digest
    assert fingerprint(opts.payload(request_, body)) == digest


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
spellings = st.sampled_from(
    [
        lambda v: json.dumps(v).encode(),
        lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass"),
        lambda v: (" " + json.dumps(v, indent=1) + "\n").encode(),
        lambda v: json.dumps(v).encode("utf-16"),
        lambda v: json.dumps(v).encode("utf-16-le"),
        lambda v: json.dumps(v).encode("utf-32"),
        lambda v: b"\xef\xbb\xbf" + json.dumps(v).encode(),
        lambda v: json.dumps(v).encode() + b"x",
        lambda v: json.dumps(v).encode()[:-1],
    ]
)
types = st.sampled_from(["application/json", "Application/JSON; charset=utf-8", "a/b+json", None])


@settings(max_examples=300, deadline=None)
@given(json_values, spellings, types)
def test_json_bodies_digest_as_json_loads_reads_them(
    value: Any, spell: Any, content_type: str | None
) -> None:
    body = spell(value)
    assert body_digest(content_type, body) == reference_body_digest(content_type, body)


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=40) | st.sampled_from([b"[NaN]", b'{"a":Infinity}', b"[1]\x00", b"[\xff]"])
)
def test_any_bytes_digest_as_before(body: bytes) -> None:
    for content_type in ("application/json", "text/plain"):
        assert body_digest(content_type, body) == reference_body_digest(content_type, body)


def test_lone_surrogates_and_deep_nesting_digest_as_bytes() -> None:
    for body in (b'["\\ud800"]', b"[" * 100_000 + b"]" * 100_000, b'{"a": -Infinity}'):
        assert body_digest("application/json", body) == reference_body_digest(
            "application/json", body
        )
        assert body_digest("application/json", body).startswith("raw:")


texts = st.text(max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["POST", "post", "PATCH", "Put"]),
    texts,
    texts,
    st.one_of(st.none(), st.binary(max_size=12)),
    st.lists(st.tuples(st.sampled_from(["x-tenant", "Accept", "x-other"]), texts), max_size=3),
    st.binary(max_size=30),
)
def test_request_fingerprints_are_the_guards(
    method: str,
    path: str,
    query: str,
    raw_path: bytes | None,
    headers: list[tuple[str, str]],
    body: bytes,
) -> None:
    opts = options()
    request = Incoming(method, path, query, Headers(headers), None, raw_path)
    assert opts.fingerprint(request, body) == fingerprint(opts.payload(request, body))


header_lists = st.lists(
    st.tuples(
        st.sampled_from(["content-type", "x-a", "date", "connection", "set-cookie", "x-b"]),
        st.text(max_size=8),
    ),
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(st.integers(100, 599), header_lists, st.binary(max_size=40))
def test_stored_responses_are_the_bytes_the_dataclass_was_stored_as(
    status: int, headers: list[tuple[str, str]], body: bytes
) -> None:
    response = StoredResponse(status, tuple(headers), body)
    try:
        before = JSON_CODEC.encode(storable(response))
    except CodecError:  # text UTF-8 can't carry: neither form can be stored
        with pytest.raises(CodecError):
            JSON_CODEC.encode(stored_form(response))
        return
    assert JSON_CODEC.encode(stored_form(response)) == before
    # A replay rebuilds the same response from those bytes as the declared type did.
    assert from_stored(JSON_CODEC.decode(before)) == JSON_CODEC.decode(before, StoredResponse)


replay_header_lists = st.lists(
    st.tuples(
        st.sampled_from(
            ["content-type", "content-length", "idempotent-replayed", "idempotency-retention"]
        ),
        st.text(max_size=4),
    ),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([200, 201, 204, 304, 404, 101]),
    replay_header_lists,
    st.binary(max_size=20),
    st.sampled_from([86400.0, None]),
)
def test_a_replay_is_the_stored_response_with_the_replay_headers_set(
    status: int, headers: list[tuple[str, str]], body: bytes, ttl: float | None
) -> None:
    # Records written by other code may hold the fields a replay sets: they give way.
    opts = HttpOptions(guard=Guard(MemoryStore(), ttl=ttl))
    plain = JSON_CODEC.decode(JSON_CODEC.encode(StoredResponse(status, tuple(headers), body)))
    assert replay_of(plain, opts) == replayed(from_stored(plain), opts)


@pytest.mark.parametrize(
    "stored",
    [
        None,
        [],
        {"status": 200, "headers": []},
        {"status": "200", "headers": [], "body": ""},
        {"status": 200, "headers": [["a"]], "body": ""},
        {"status": 200, "headers": [["a", 1]], "body": ""},
        {"status": 200, "headers": {}, "body": ""},
        {"status": 200, "headers": [], "body": "a"},
        {"status": 200, "headers": [], "body": "é"},
    ],
)
def test_what_is_not_a_stored_response_is_a_codec_error(stored: Any) -> None:
    with pytest.raises(CodecError):
        from_stored(stored)
    with pytest.raises(CodecError):
        replay_of(stored, options())


def test_a_record_that_is_not_a_response_replays_as_a_409_not_a_500() -> None:
    import asyncio

    from mideng.http import asgi

    guard = Guard(MemoryStore())
    runs: list[int] = []

    async def app(scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        runs.append(1)
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"made"})

    middleware = asgi.IdempotencyMiddleware(app, guard=guard)
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/orders",
        "raw_path": b"/orders",
        "query_string": b"",
        "headers": [(b"idempotency-key", b'"k-1"')],
    }
    request = asgi.incoming(scope)
    opts = middleware.options
    # What some other writer left under the request's own scope, key and fingerprint.
    guard.run("http:-", "k-1", lambda: {"status": 200}, payload=opts.payload(request, b""))

    async def call() -> list[asgi.Message]:
        sent: list[asgi.Message] = []

        async def receive() -> asgi.Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: asgi.Message) -> None:
            sent.append(message)

        await middleware(dict(scope), receive, send)
        return sent

    start, body = asyncio.run(call())
    assert start["status"] == 409
    assert json.loads(body["body"])["type"] == "urn:mideng:problem:replay-unavailable"
    assert runs == []
