"""Hostile request headers to the ASGI middleware, as raw bytes no HTTP client would send:
malformed or odd Idempotency-Keys (lenient and strict), names in any case or as a bytearray,
repeated fields, garbled request ids and lying lengths. Each is a 400 or runs once."""

from __future__ import annotations

import pytest

from mideng import Guard
from mideng.http import asgi
from mideng.stores.memory import MemoryStore
from tests.http.asgi_calls import (
    KEY,
    call,
    counting,
    middleware,
    run,
)


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


# -- the Idempotency-Key's bytes -------------------------------------------------------------
MALFORMED = {
    "empty": [b""],
    "whitespace": [b"   \t "],
    "empty string": [b'""'],
    "10 kB string": [b'"' + b"k" * 10_000 + b'"'],
    "10 kB bare": [b"k" * 10_000],
    "256 characters": [b'"' + b"k" * 256 + b'"'],
    "latin-1": [b'"caf\xe9"'],
    "invalid UTF-8": [b'"\xff\xfe"'],
    "UTF-8": ['"café"'.encode()],
    "NUL": [b'"a\x00b"'],
    "control": [b"a\x01b"],
    "tab inside": [b'"a\tb"'],
    "newline": [b'"a\nb"'],
    "DEL": [b'"a\x7fb"'],
    "bad escape": [b'"a\\nb"'],
    "unterminated": [b'"abc'],
    "two items": [b'"a", "b"'],
    "two lines": [b'"a"', b'"b"'],
    "two equal lines": [b'"a"', b'"a"'],
    "boolean": [b"?1"],
    "space in bare": [b"a b"],
    "bad parameter": [b'"k";A=1'],
    "trailing junk": [b'"k" x'],
}


@pytest.mark.parametrize("values", MALFORMED.values(), ids=MALFORMED.keys())
@pytest.mark.parametrize("lenient", [True, False])
def test_malformed_keys_are_400_and_run_nothing(values: list[bytes], lenient: bool) -> None:
    runs: list[int] = []
    app = middleware(counting(runs), lenient=lenient)
    got = run(call(app, [(b"idempotency-key", v) for v in values]))
    assert (got.status, got.problem()) == (400, "key-malformed")
    assert runs == []


# (header value, the key it names or None: refused), lenient and strict
ITEMS = [
    (b'"k"', "k", "k"),
    (b' \t"k"\t ', "k", "k"),
    (b'"k";a=1;b="x";c', "k", "k"),
    (b'"a\\"b"', 'a"b', 'a"b'),
    (b'"a\\\\b"', "a\\b", "a\\b"),
    (b'" "', " ", " "),
    (b'"' + b"k" * 255 + b'"', "k" * 255, "k" * 255),
    (b"tok", "tok", None),
    (b"tok;a=1", "tok", None),
    (b":YWJj:", ":YWJj:", None),
    (b"42", "42", None),
    (b"-1.5", "-1.5", None),
    (b"8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324", None),
]


@pytest.mark.parametrize(("value", "lenient_key", "strict_key"), ITEMS)
@pytest.mark.parametrize("lenient", [True, False])
def test_structured_field_items_name_their_key(
    value: bytes, lenient_key: str, strict_key: str | None, lenient: bool
) -> None:
    """Each accepted spelling runs once under its key and replays; one refused is a 400."""
    runs: list[int] = []
    guard = Guard(MemoryStore())
    app = asgi.IdempotencyMiddleware(counting(runs), guard=guard, lenient=lenient)
    expected = lenient_key if lenient else strict_key
    first = run(call(app, [(b"idempotency-key", value)]))
    if expected is None:
        assert (first.status, first.problem()) == (400, "key-malformed")
        assert runs == []
        return
    again = run(call(app, [(b"idempotency-key", value)]))
    assert first.status == again.status == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert runs == [1]
    assert guard.get("http:-", expected) is not None


def test_header_names_in_any_case_and_duplicates_of_other_fields() -> None:
    runs: list[int] = []
    app = middleware(counting(runs))
    headers = [
        (b"Idempotency-Key", b'"case"'),
        (b"Content-Type", b"application/json"),
        (b"content-type", b"text/plain"),  # two types: compared byte for byte
        (b"X-Request-Id", b"rid-9"),
    ]
    first, again = run(call(app, headers, b'{"a":1}')), run(call(app, headers, b'{"a":1}'))
    assert first.status == again.status == 201
    assert first.headers["x-request-id"] == again.headers["x-request-id"] == "rid-9"
    assert again.headers["idempotent-replayed"] == "true"
    assert run(call(app, headers, b'{"a": 1}')).status == 422
    assert runs == [1]


@pytest.mark.parametrize(
    "rid", [b"", b" ", b"a b", b"x" * 129, b"x" * 100_000, b"caf\xe9", b"a\r\nSet-Cookie: x=1"]
)
def test_a_garbled_request_id_is_replaced_never_echoed(rid: bytes) -> None:
    runs: list[int] = []
    app = middleware(counting(runs))
    got = run(call(app, [*KEY, (b"x-request-id", rid)]))
    assert got.status == 201
    sent = got.headers["x-request-id"]
    assert sent.encode() != rid
    assert len(sent) == 32
    assert sent.isalnum()
    assert "set-cookie" not in got.headers


@pytest.mark.parametrize("length", [b"-5", b"abc", b"1e3", b"9" * 5000, b"", b" 2 ", b"0"])
def test_a_content_length_that_lies_is_never_a_500(length: bytes) -> None:
    """The server enforces the length; the middleware only refuses one over max_body early and
    bounds what it reads by the messages themselves."""
    runs: list[int] = []
    app = middleware(counting(runs), max_body=10)
    got = run(call(app, [*KEY, (b"content-length", length)], b"{}"))
    assert got.status == 201
    big = run(call(app, [(b"idempotency-key", b'"big"'), (b"content-length", length)], b"x" * 11))
    assert (big.status, big.problem()) == (413, "body-too-large")
    assert runs == [1]
    declared = run(call(app, [(b"idempotency-key", b'"d"'), (b"content-length", b"11")], b""))
    assert declared.status == 413
