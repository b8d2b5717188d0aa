"""The codec of a stored response: its record bytes written directly, the JSON codec's bytes
without its walk.

Every guarded response that is kept is encoded once. The JSON codec's C encoder walks the stored
form (a dict, a list of header pairs, the body's base64) at about 14 thousand instructions for
a small response, most of it per-call set-up and the generic walk; the same bytes written from
the three fields directly are a few C calls. The spelling is the codec's own (``,`` and ``:``
without spaces, the fields in order, strings through the C string encoder, text as UTF-8), so
records written here and by the codec are alike to every reader (pinned in
tests/http/test_response_codec.py). The record still names the ``json`` codec: a replay decodes
it as JSON, whichever wrote it.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Callable
from typing import Any

from mideng.core.codec import JSON_CODEC


class Form(tuple[int, tuple[tuple[str, str], ...], bytes]):
    """What ``Exchange.keep`` hands the codec for a response: status, the headers a replay
    repeats (already filtered), the body. Its own type, so nothing else is taken for one."""

    __slots__ = ()


# A JSON string as the codec spells it (ensure_ascii off): the C function the codec calls.
_string: Callable[[str], str] = json.encoder.encode_basestring


def response_bytes(status: int, headers: tuple[tuple[str, str], ...], body: bytes) -> bytes:
    """``JSON_CODEC.encode(stored_form(...))`` for these fields; CodecError where it fails."""
    return RESPONSE_CODEC.encode(Form((status, headers, body)))


def _base64(body: bytes) -> str:
    return binascii.b2a_base64(body, newline=False).decode("ascii")


def _plain(value: Form) -> dict[str, Any]:
    """The stored form as plain data, for the JSON codec's own walk."""
    status, headers, body = value
    return {"status": status, "headers": headers, "body": _base64(body)}


class ResponseCodec:
    """The HTTP layer's codec: a ``Form`` is written directly (``response_bytes``);
    anything else, and every record read back, is the JSON codec's."""

    name = JSON_CODEC.name
    raises_codec_error = True  # the JSON codec's errors, or its own CodecError

    def encode(self, value: Any) -> bytes:
        if type(value) is not Form:
            return JSON_CODEC.encode(value)
        status, headers, body = value
        if type(status) is not int:  # an int subclass spells as the codec decides: let it
            return JSON_CODEC.encode(_plain(value))
        fields = ",".join([f"[{_string(n)},{_string(v)}]" for n, v in headers])
        text = f'{{"status":{status},"headers":[{fields}],"body":"{_base64(body)}"}}'
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: the codec fails it, with its own error
            return JSON_CODEC.encode(_plain(value))

    def decode(self, data: bytes, type_hint: Any = None) -> Any:
        return JSON_CODEC.decode(data, type_hint)


RESPONSE_CODEC = ResponseCodec()
