"""A record as the Redis store keeps it: everything about hash fields <-> Record, in one place.

A record is one hash with a field per attribute. ``NAMES`` is the one definition of those
fields and of their order (Record's), which Python and Lua share: an ``HMGET`` reads them in
it, put.lua takes them as its arguments in it, and the Lua head numbers them by it, from the
declarations ``lua_fields()`` writes into lua/record.lua when the code is loaded. Nothing in
lua/ spells the list or its length again. ``FIELDS`` adds how each is written and read, as
the attribute's type says.

The operations answer with one string (see ``decode``); that layout is record.lua's ``reply``
and this module's ``decode``, and only they know it. The batch operations' compact replies are
claim_many.lua's and complete_many.lua's, read by ``claims`` and ``completions``. Records are
built by field name, except where a reply is decoded: that runs on every call, and fifteen
keywords cost twice what positions do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, get_args, get_type_hints

from mideng.core.record import (
    PROCESSING,
    RECORD_FIELDS,
    SUCCEEDED,
    ClaimRequest,
    Record,
    Status,
)
from mideng.stores.batch import Completion

STATUSES = {s.value.encode(): s for s in Status}


def opt(value: str | None) -> str:
    """An optional string as record.lua's ``opt`` reads it: '' absent, '=' + value present,
    so an empty value stays a value."""
    return "" if value is None else "=" + value


def opt_bytes(value: bytes | None) -> bytes:
    return b"" if value is None else b"=" + value


def seconds(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _status(value: Status) -> str:
    return "=" + value.value


def _number(value: int) -> str:
    return f"={value}"


def _text(value: str) -> str:
    return "=" + value


def _blob(value: bytes) -> bytes:
    return b"=" + value


def _time(value: float) -> str:
    # Whole microseconds, as the scripts write times, where that is the value exactly; else
    # repr, which keeps a durable store's finer time exact (Lua only compares them).
    micros = round(value * 1_000_000)
    if micros / 1_000_000 == value:
        return f"={micros}"
    return "=" + repr(float(value))


def instant(value: bytes) -> float:
    """A stored time in seconds: whole epoch microseconds as layout 2 writes them
    (``1765152000123456``), or seconds as layout 1 wrote them (``1765152000.123456``)."""
    return int(value) / 1_000_000 if value.isdigit() else float(value)


def _decoded(value: bytes) -> str:
    return value.decode()


def _same(value: bytes) -> bytes:
    return value


class Field(NamedTuple):
    name: str  # in the hash
    attribute: str  # of Record
    optional: bool  # an absent attribute is an absent field
    write: Callable[[Any], str | bytes]  # a present value as put.lua's argument
    read: Callable[[bytes], Any]  # a present value from HMGET


#: The hash's field names, one for each Record attribute after scope and key, in Record's
#: order: what an HMGET of a whole record asks for.
NAMES = ("s", "f", "o", "fp", "lu", "r", "c", "e", "a", "rid", "ca", "ua", "ea")

# How a value of each of Record's types is written for put.lua and read from HMGET.
_CODECS: dict[Any, tuple[Callable[[Any], str | bytes], Callable[[bytes], Any]]] = {
    Status: (_status, STATUSES.__getitem__),
    int: (_number, int),
    str: (_text, _decoded),
    float: (_time, instant),
    bytes: (_blob, _same),
}


def _field(name: str, attribute: str, hint: Any) -> Field:
    """The hash field ``name`` of ``attribute``, written and read as its type ``hint`` says:
    optional where the attribute may be None."""
    optional = type(None) in get_args(hint)
    kind = next(t for t in get_args(hint) if t is not type(None)) if optional else hint
    return Field(name, attribute, optional, *_CODECS[kind])


_HINTS = get_type_hints(Record)
FIELDS: tuple[Field, ...] = tuple(
    _field(name, attribute, _HINTS[attribute])
    for name, attribute in zip(NAMES, RECORD_FIELDS[2:], strict=True)
)

#: The longest value kept whole in the hash. A longer one would turn the whole hash from a
#: listpack into a hashtable (Redis' hash-max-listpack-value, 64 by default): about 920 bytes a
#: record instead of 260. Key layout 2 cuts a longer result or error into pieces of INLINE
#: bytes, kept in the same hash under the field names "1", "2", ...
INLINE = 64

#: The most pieces a value is cut into (6400 bytes); a longer one stays whole. With the
#: record's own fields the hash stays within Redis' hash-max-listpack-entries (128).
PIECES = 100

#: The hash field saying which field was cut and into how many pieces ("r32": the result, in
#: 32); absent when none was. A record without it is read as layout 1 wrote it.
CUT = "x"

#: What a cut field holds under its own name: one byte no release's reader takes for a value.
#: A layout-1 process (which knows nothing of pieces) then reads a cut result as this byte,
#: which no codec of mideng's decodes (not UTF-8, not a pickle): its replay raises a
#: CodecError, where an absent field would have been an empty result. A cut error is a
#: recorded failure to it (one it cannot read, RecordedFailureError), never a failure without
#: one, which it would run again. A cut field holding anything else was written over by such a
#: process since: its pieces are stale and are not read.
IN_PIECES = b"\xff"

_NAMES = [name.encode() for name in NAMES]
_CUT = CUT.encode()
_CUT_VALUE = re.compile(rb"([a-z]+)([0-9]+)")
# A field that may be cut -> its position in NAMES.
_POSITIONS = {name.encode(): NAMES.index(name) for name in ("r", "e")}

# Where lua/record.lua has the declarations written in.
LUA_MARK = "--@fields\n"


def lua_fields() -> str:
    """Lua declaring FIELDS: their names in order; a constant per field, named as the field
    in capitals, holding its position (S for 's'); their number; NONE, an absent record; and
    for the pieces of a long value: X, the position read() gives CUT's value, XNAME, CUT,
    INLINE, PIECES and IN_PIECES."""
    names = ", ".join(f"'{name}'" for name in NAMES)
    constants = ", ".join(name.upper() for name in NAMES)
    positions = ", ".join(str(i) for i in range(1, len(NAMES) + 1))
    absent = ", ".join("false" for _ in NAMES)
    return (
        f"local FIELDS = {{{names}}}\n"
        f"local {constants} = {positions}\n"
        f"local NFIELDS = {len(NAMES)}\n"
        f"local NONE = {{{absent}}}\n"
        f"local X, XNAME, INLINE, PIECES = {len(NAMES) + 1}, '{CUT}', {INLINE}, {PIECES}\n"
        f"local IN_PIECES = '{_lua_bytes(IN_PIECES)}'\n"
    )


def _lua_bytes(value: bytes) -> str:
    return "".join(f"\\{b}" for b in value)


def put_args(record: Record) -> list[str | bytes]:
    """put.lua's arguments: every field of ``record``, in FIELDS order, each optional."""
    args: list[str | bytes] = []
    for field in FIELDS:
        value = getattr(record, field.attribute)
        args.append("" if value is None else field.write(value))
    return args


def joined(fields: dict[bytes, bytes]) -> list[bytes | None]:
    """The values of NAMES in a record's HGETALL, a field cut in pieces joined again (unless
    a layout-1 process wrote over it since: then as it holds it)."""
    values = [fields.get(name) for name in _NAMES]
    cut = _CUT_VALUE.fullmatch(fields.get(_CUT) or b"")
    at = None if cut is None else _POSITIONS.get(cut[1])
    if cut is not None and at is not None and values[at] == IN_PIECES:
        pieces = range(1, int(cut[2]) + 1)
        values[at] = b"".join(fields[str(i).encode()] for i in pieces)
    return values


def row(scope: str, key: str, values: Sequence[bytes | None]) -> Record | None:
    """A record from an HMGET of NAMES (or ``joined`` of its HGETALL); None when it vanished
    before the read."""
    attributes: dict[str, Any] = {}
    for field, value in zip(FIELDS, values, strict=True):
        if value is not None:
            attributes[field.attribute] = field.read(value)
        elif not field.optional:
            return None
    return Record(scope=scope, key=key, **attributes)


def _cut(reply: bytes, start: int, length: bytes) -> tuple[bytes | None, int]:
    if length == b"-":
        return None, start
    end = start + int(length)
    return reply[start:end], end


def _str(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def decode(
    scope: str, key: str, reply: bytes, result: bytes | None = None, error: bytes | None = None
) -> tuple[int, bytes, Record | None]:
    """An operation's reply: (code, extra, record or None).

    The reply is ``code|extra`` without a record; with one, record.lua's ``reply`` writes
    ``code|extra|s|f|a|ca|ua|ea|lu|#o|#fp|#rid|#c|#r|#e``, a newline, then o fp rid c r e back
    to back (an absent optional field has length '-', an absent time is empty).
    ``result`` / ``error`` stand in for what an operation left out because the caller sent it.
    """
    nl = reply.find(b"\n")
    if nl < 0:
        code, _, extra = reply.partition(b"|")
        return int(code), extra, None
    # Slices are taken from the reply itself, so a large result is copied once, not twice.
    code, extra, s, f, a, ca, ua, ea, lu, lo, lfp, lrid, lc, lr, le = reply[:nl].split(b"|")
    end = nl + 1 + int(lo)
    owner = reply[nl + 1 : end].decode()
    fp, end = _cut(reply, end, lfp)
    rid, end = _cut(reply, end, lrid)
    codec, end = _cut(reply, end, lc)
    if result is None:
        result, end = _cut(reply, end, lr)
    if error is None:
        error, end = _cut(reply, end, le)
    record = Record(
        scope,
        key,
        STATUSES[s],
        int(f),
        owner,
        _str(fp),
        instant(lu) if lu else None,
        result,
        _str(codec),
        error,
        int(a),
        _str(rid),
        instant(ca),
        instant(ua),
        instant(ea) if ea else None,
    )
    return int(code), extra, record


def _batch(reply: bytes, fixed: int) -> tuple[list[bytes], list[bytes]]:
    """A batch operation's reply: its ``fixed`` leading head fields and each key's answer."""
    nl = reply.find(b"\n")
    head = reply[:nl].split(b"|")
    answers, pos = [], nl + 1
    for length in head[fixed:]:
        end = pos + int(length)
        answers.append(reply[pos:end])
        pos = end
    return head[:fixed], answers


def claims(reqs: Sequence[ClaimRequest], reply: bytes) -> list[tuple[int, Record]]:
    """claim_many.lua's reply: each request's outcome code and record, in order.

    A new key's answer is empty and its record is built here from the request and the head
    (the clock, the lease and expiry stamps the script gave every new claim); a key taken
    over answers its fence, attempts and creation time; any other outcome the whole record.
    """
    (at, lu, ea), answers = _batch(reply, 3)
    now, lease_until = instant(at), instant(lu)
    expires = instant(ea) if ea else None
    out: list[tuple[int, Record]] = []
    for req, answer in zip(reqs, answers, strict=True):
        if not answer or answer[0] == 48:  # b"0": acquired, over an old record
            fence, attempts, created = 1, 1, now
            if answer:
                _, f, a, ca = answer.split(b"|")
                fence, attempts, created = int(f), int(a), instant(ca)
            result = codec = error = None  # a new claim's
            record = Record(
                req.scope,
                req.key,
                PROCESSING,
                fence,
                req.owner,
                req.fingerprint,
                lease_until,
                result,
                codec,
                error,
                attempts,
                req.request_id,
                created,
                now,
                expires,
            )
            out.append((0, record))
            continue
        code, _, found = decode(req.scope, req.key, answer)
        assert found is not None
        out.append((code, found))
    return out


def completions(items: Sequence[Completion], reply: bytes) -> list[tuple[bool, Record | None]]:
    """complete_many.lua's reply: for each completion, in order, (True, the finished record),
    or (False, the record as it now stands, None when gone) when its ticket lost the key.

    A completed key answers only what the ticket and the completion do not tell (attempts,
    creation time, fingerprint, request id); the head has the clock and the expiry stamp.
    """
    (at, ea), answers = _batch(reply, 2)
    now = instant(at)
    expires = instant(ea) if ea else None
    out: list[tuple[bool, Record | None]] = []
    for item, answer in zip(items, answers, strict=True):
        t = item.ticket
        if answer[0] != 49:  # b"1": completed
            out.append((False, decode(t.scope, t.key, answer)[2]))
            continue
        _, a, ca, lfp, lrid, tail = answer.split(b"|", 5)
        fp = rid = None
        if tail or lfp != b"-" or lrid != b"-":  # most consumers' records have neither
            fp, end = _cut(tail, 0, lfp)
            rid, _ = _cut(tail, end, lrid)
        lease_until = error = None  # a completed record's
        record = Record(
            t.scope,
            t.key,
            SUCCEEDED,
            t.fence,
            t.owner,
            _str(fp),
            lease_until,
            item.result,
            item.codec,
            error,
            int(a),
            _str(rid),
            instant(ca),
            now,
            expires,
        )
        out.append((True, record))
    return out
