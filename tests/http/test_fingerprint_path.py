"""The fingerprint's one-frame path gives the digest its parts give: the body digest, the text
forms and the request fingerprint they make, for every body a client may send as JSON."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mideng.http.identity import (
    NO_HEADERS,
    body_digest,
    exact,
    http_fingerprint,
    path_form,
    request_fingerprint,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    json_values.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    json_values.map(lambda v: (" " + json.dumps(v) + "\n").encode()),
    json_values.map(lambda v: json.dumps(v).encode("utf-16")),
    json_values.map(lambda v: json.dumps(v).encode()[:-1]),
    st.sampled_from([b"{}", b"[]", b'{"a": NaN}', b'{"a":1}x', b"[" * 3000, b'["\xed\xb3\xbf"]']),
    st.binary(max_size=20),
)
types = st.sampled_from(
    ["application/json", "Application/JSON; charset=utf-8", "a/b+json", "text/plain", None]
)
texts = st.sampled_from(["POST", "/orders", "", "a=1", "caf\xe9", "\udcff", "/p/\ufffd"])


def by_parts(
    method: str, path: str, query: str, raw: bytes | None, ctype: str | None, body: bytes
) -> str:
    forms = exact(method), path_form(path, raw), exact(query)
    return request_fingerprint(*forms, body_digest(ctype, body), NO_HEADERS)


@settings(max_examples=600, deadline=None)
@given(texts, texts, texts, st.one_of(st.none(), st.binary(max_size=6)), types, bodies)
def test_the_one_frame_digest_is_the_parts_digest(
    method: str, path: str, query: str, raw: bytes | None, ctype: str | None, body: bytes
) -> None:
    got = http_fingerprint(method, path, query, raw, ctype, body, NO_HEADERS)
    assert got == by_parts(method, path, query, raw, ctype, body)


def test_a_usual_request_digests_as_before() -> None:
    body: Any = b'{"item": "book", "qty": 2}'
    got = http_fingerprint("POST", "/orders", "", b"/orders", "application/json", body, NO_HEADERS)
    assert got == by_parts("POST", "/orders", "", b"/orders", "application/json", body)
