"""The header names mideng puts on every message it publishes and reads back when consuming,
how a header a broker delivers is read as text, and how an AMQP table is written back as it
was read (``amqp_copy``: a dead-letter copy's headers).

One message id travels from an outbox row to the broker and to the consumer's dedup; the
business key and the request id ride along so a consumer can dedupe on the key the producer
chose and carry the producer's request id into its own logs and records.

Every adapter reads its broker's headers through ``text_headers`` (or, where the values are
always bytes, ``decoded``), so a header means the same on each: text is text, bytes are UTF-8,
and a value that is not text is no header at all. ``str()`` of any value read an AMQP void or
a Kafka null as the key ``"None"``, shared by every such event, and a list as its repr; a
decode that replaced bad bytes made ``b"order-\\xff"`` and ``b"order-\\xfe"`` one key.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping

#: The publisher's own id for the message (an outbox row id): the same on every re-publish.
MESSAGE_ID = "message-id"
#: The business key the producer dedupes on (``order:123456``).
IDEMPOTENCY_KEY = "idempotency-key"
#: The request id current when the message was produced.
REQUEST_ID = "x-request-id"

_BACKSLASH, _ESCAPED_BACKSLASH = b"\\", b"\\\\"
#: What a client that decodes header values itself (nats-py) writes for bytes not UTF-8.
REPLACEMENT = "\ufffd"


def decoded(value: bytes) -> str:
    """``value`` as UTF-8 text; bytes that are not UTF-8 written as ``\\xNN`` escapes.

    Each undecodable byte keeps its own escape, so two keys that differ only there stay two
    keys (a replacement character made them one, and the second event was acked unrun). In a
    value that needs escapes every backslash is doubled as well, so the text reads back to
    exactly these bytes and no two such values read the same. A UTF-8 value is never
    changed."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.replace(_BACKSLASH, _ESCAPED_BACKSLASH).decode("utf-8", "backslashreplace")


def header_text(value: object) -> str | None:
    """A header value as text: a string as it is, bytes ``decoded``, an integer in decimal
    (AMQP producers send ids and counts as integers); None for anything else: a null (AMQP
    void, a Kafka null), a bool, a float, a timestamp, a list or a table, none of which is a
    business key or a request id."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):  # an AMQP byte array is a bytearray
        return decoded(bytes(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def text_headers(pairs: Iterable[tuple[object, object]]) -> dict[str, str]:
    """The headers of ``pairs`` (name, value) that are text on both sides, as text; the rest
    are left out, so a key or request id read from them is missing, never a repr. The
    broker's own message (``Message.raw``) still has every header as it came."""
    out: dict[str, str] = {}
    for name, value in pairs:
        name_text, value_text = header_text(name), header_text(value)
        if name_text is not None and value_text is not None:
            out[name_text] = value_text
    return out


def unreplaced_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers a client decoded itself, without the values in which it replaced bytes that were
    not UTF-8 (nats-py writes U+FFFD for them, before the adapter sees them). Such a value is
    no longer the producer's: two keys that differed there read the same, and the second event
    was acked unrun. Left out, as a value of no text is by ``text_headers``, a key read from
    it is missing, never a collision (a value that really holds U+FFFD is left out too: the
    two cannot be told apart)."""
    return {name: value for name, value in headers.items() if REPLACEMENT not in value}


def amqp_copy(table: Mapping[str, object]) -> dict[str, object]:
    """An AMQP header table as pamqp (aio-pika's codec) read it, made into one pamqp writes back
    with every value the same: a message's headers for its dead-letter copy.

    Read as it came, a table could not always be written back, and the copy was refused on
    every try: pamqp reads a long string that is not UTF-8 as bytes and writes no bytes, and
    it writes every float in single precision (a double out of its range raised, one within it
    was rounded). Each value goes as ``_amqp_value`` says."""
    return {name: _amqp_value(value) for name, value in table.items()}


def _amqp_value(value: object) -> object:
    """``value`` as pamqp writes it back: bytes (a long string not UTF-8) as a byte array of
    the same bytes, a double single precision cannot hold as its text (which reads back to
    that double), tables and arrays value by value; anything else as it is (an integer keeps
    its value in the smallest type that holds it, a timestamp goes in whole seconds: pamqp
    writes no other)."""
    if isinstance(value, bytes):
        return bytearray(value)
    if isinstance(value, Mapping):
        return amqp_copy(value)
    if isinstance(value, list):
        return [_amqp_value(item) for item in value]
    if isinstance(value, float) and not _single_precision(value):
        return repr(value)
    return value


def _single_precision(value: float) -> bool:
    """Whether single precision holds ``value`` exactly (it does every float pamqp read from a
    single-precision field; a double it may not)."""
    try:
        (single,) = struct.unpack(">f", struct.pack(">f", value))
    except OverflowError:
        return False
    return bool(single == value or math.isnan(value))
