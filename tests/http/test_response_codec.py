"""A kept response's record bytes, written by the HTTP codec, are the JSON codec's bytes for its
stored form: a record written either way replays alike (and a record written before the HTTP
codec existed is one of them)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mideng import Guard
from mideng.core.codec import JSON_CODEC
from mideng.errors import CodecError
from mideng.http.core import HttpOptions, StoredResponse
from mideng.http.exchange import storable_headers, stored_form
from mideng.http.response_codec import RESPONSE_CODEC, Form, response_bytes
from mideng.stores.memory import MemoryStore

texts = st.text(max_size=8) | st.sampled_from(
    ['"', "\\", "\n", "\x00", "\x7f", "caf\xe9", "\udcff"]
)


@settings(max_examples=500, deadline=None)
@given(
    st.integers(100, 599),
    st.lists(st.tuples(texts, texts), max_size=5),
    st.binary(max_size=60),
)
def test_the_bytes_are_the_json_codecs(
    status: int, headers: list[tuple[str, str]], body: bytes
) -> None:
    response = StoredResponse(status, tuple(headers), body)
    kept = storable_headers(response.headers)
    try:
        expected = JSON_CODEC.encode(stored_form(response))
    except CodecError:  # text UTF-8 can't carry: neither can store it
        with pytest.raises(CodecError):
            RESPONSE_CODEC.encode(Form((status, kept, body)))
        return
    assert RESPONSE_CODEC.encode(Form((status, kept, body))) == expected
    assert response_bytes(status, kept, body) == expected


def test_a_status_that_is_not_a_plain_int_is_spelled_as_the_codec_spells_it() -> None:
    assert response_bytes(True, (), b"") == JSON_CODEC.encode(
        {"status": True, "headers": [], "body": ""}
    )


@pytest.mark.parametrize("value", [(201, (), b""), [201, [], ""], {"a": 1}, "text", None])
def test_anything_but_a_form_is_the_json_codecs(value: Any) -> None:
    assert RESPONSE_CODEC.encode(value) == JSON_CODEC.encode(value)


def test_records_name_the_json_codec_and_decode_as_json() -> None:
    data = RESPONSE_CODEC.encode(Form((201, (("content-type", "text/plain"),), b"ok")))
    assert RESPONSE_CODEC.name == "json"
    assert RESPONSE_CODEC.decode(data) == JSON_CODEC.decode(data)


def test_the_http_policy_uses_it() -> None:
    assert HttpOptions(guard=Guard(MemoryStore())).policy().codec is RESPONSE_CODEC
