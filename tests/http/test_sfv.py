"""RFC 8941 Items, and the Idempotency-Key reading built on them."""

from __future__ import annotations

from decimal import Decimal

import pytest

from mideng.http.identity import body_digest
from mideng.http.sfv import SFVError, Token, parse_item, parse_key


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('"abc"', "abc"),
        ('"a \\"q\\" \\\\ b"', 'a "q" \\ b'),
        ('""', ""),
        ('  "x"  ', "x"),
        ("tok", Token("tok")),
        ("*t:o/k", Token("*t:o/k")),
        ("42", 42),
        ("-7", -7),
        ("3.14", Decimal("3.14")),
        (":aGVsbG8=:", b"hello"),
        ("?1", True),
        ("?0", False),
    ],
)
def test_bare_items(text: str, value: object) -> None:
    item, params = parse_item(text)
    assert item == value
    assert type(item) is type(value)
    assert params == {}


def test_parameters_are_parsed() -> None:
    item, params = parse_item('"k";a=1;b;c="x";*d=tok')
    assert item == "k"
    assert params == {"a": 1, "b": True, "c": "x", "*d": Token("tok")}


@pytest.mark.parametrize(
    "text",
    [
        "",
        '"open',
        '"bad \\n escape"',
        '"tab\there"',
        '"é"',
        "1234567890123456",
        "1.2345",
        "1.",
        ":not base64!:",
        "?2",
        '"a", "b"',
        '"a" "b"',
        '"x";',
        '"x";A=1',
        "(a b)",
        "@1",
    ],
)
def test_malformed_items_raise(text: str) -> None:
    with pytest.raises(SFVError):
        parse_item(text)


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ('"8e03978e-40d5-43e8-bc93-6894a57f9324"', "8e03978e-40d5-43e8-bc93-6894a57f9324"),
        ('"with space"', "with space"),
        ('"k";ignored=1', "k"),
        ("8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"),
        ("token", "token"),
        ("token;v=1", "token"),
        ("12345", "12345"),
        ("YWJj+/w==", "YWJj+/w=="),
    ],
)
def test_keys_lenient(value: str, key: str) -> None:
    assert parse_key(value) == key


@pytest.mark.parametrize(
    "value", ['""', "?1", "a b", '"a", "b"', "a;B", "(x)", "caf\xe9", '"' + "k" * 256 + '"']
)
def test_keys_refused(value: str) -> None:
    assert parse_key(value) is None


def test_strict_mode_wants_an_sf_string() -> None:
    assert parse_key('"abc"', lenient=False) == "abc"
    assert parse_key("abc", lenient=False) is None
    assert parse_key("8e03978e-40d5", lenient=False) is None


def test_json_bodies_hash_by_meaning_others_by_bytes() -> None:
    json_type = "application/json; charset=utf-8"
    assert body_digest(json_type, b'{"a":1,"b":2}') == body_digest(json_type, b'{ "b": 2, "a": 1 }')
    assert body_digest(json_type, b'{"a":1}') != body_digest(json_type, b'{"a":2}')
    assert body_digest("application/vnd.x+json", b"[1, 2]") == body_digest(
        "application/vnd.x+json", b"[1,2]"
    )
    assert body_digest("text/plain", b'{"a":1,"b":2}') != body_digest(
        "text/plain", b'{"b":2,"a":1}'
    )
    # Invalid JSON, NaN and deep nesting fall back to the raw bytes instead of failing.
    for body in (b"{not json", b'{"a": NaN}', b"[" * 100_000, b"\xff\xfe"):
        assert body_digest(json_type, body).startswith("raw:")
