"""The Redis store's wire format: its Lua code, how arguments go in and records come out.

Every operation is ``lua/record.lua`` (the shared head: field order, clock, read, save, reply)
followed by the operation's own file, so each rule is written once. The same files make two
forms of the code:

- a function library (Redis 7+): the head runs once, when the library is loaded, and each
  operation is a registered function called with ``FCALL``. This is the fast form: an
  ``EVALSHA`` re-runs the head (a dozen closures and tables) on every call, which costs more
  server time than reading and answering the record.
- one script per operation, for ``EVALSHA`` on servers without functions (Redis 6).

The library's name carries a hash of its text, so two versions of mideng sharing one server
never replace each other's functions. An operation answers with one string (a short header,
then the variable-length fields back to back), which costs the client one bulk reply to parse
and a few slices to decode.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from mideng.core.record import Outcome, Record, Status

# Reply position -> Outcome, as numbered in claim.lua.
OUTCOMES = (
    Outcome.ACQUIRED,
    Outcome.REPLAY,
    Outcome.IN_PROGRESS,
    Outcome.MISMATCH,
    Outcome.UNRESOLVED,
)
STATUSES = {s.value.encode(): s for s in Status}
# A record's hash fields, as record.lua's FIELDS.
FIELDS = ("s", "f", "o", "fp", "lu", "r", "c", "e", "a", "rid", "ca", "ua", "ea")


@dataclass(frozen=True)
class Script:
    name: str
    text: str  # the EVALSHA form: head + operation
    sha: str
    function: str  # the FCALL form: this operation's name in the library


def _read(name: str) -> str:
    return (
        resources.files("mideng.stores.redis")
        .joinpath("lua")
        .joinpath(f"{name}.lua")
        .read_text("utf-8")
    )


def _library_name(head: str, bodies: dict[str, str]) -> str:
    digest = hashlib.sha1(head.encode("utf-8"))
    for name, body in bodies.items():
        digest.update(f"\0{name}\0{body}".encode())
    return f"mideng_{digest.hexdigest()[:16]}"


def _library(name: str, head: str, bodies: dict[str, str]) -> str:
    # An operation file is a script body over KEYS and ARGV; as a function it takes them as
    # parameters, so the same text serves both forms.
    parts = [f"#!lua name={name}\n", head]
    for op, body in bodies.items():
        parts.append(
            f"\nredis.register_function('{name}_{op}', function(KEYS, ARGV)\n{body}\nend)\n"
        )
    return "".join(parts)


@dataclass(frozen=True)
class Scripts:
    claim: Script
    complete: Script
    fail: Script
    release: Script
    heartbeat: Script
    resolve: Script
    get: Script
    put: Script
    take_token: Script
    hit: Script
    head: str  # lua/record.lua, shared by every operation
    library: str  # the FUNCTION LOAD text holding every operation

    def all(self) -> list[Script]:
        return [getattr(self, name) for name in _OPERATIONS]

    @classmethod
    def load(cls) -> Scripts:
        head = _read("record")
        bodies = {name: _read(name) for name in _OPERATIONS}
        lib = _library_name(head, bodies)
        scripts = {
            name: Script(
                name,
                head + body,
                hashlib.sha1((head + body).encode("utf-8")).hexdigest(),
                f"{lib}_{name}",
            )
            for name, body in bodies.items()
        }
        return cls(**scripts, head=head, library=_library(lib, head, bodies))


_OPERATIONS = tuple(
    name for name in Scripts.__dataclass_fields__ if name not in ("head", "library")
)


_scripts: Scripts | None = None


def scripts() -> Scripts:
    """The scripts, read from the package once per process."""
    global _scripts
    if _scripts is None:
        _scripts = Scripts.load()
    return _scripts


def opt(value: str | None) -> str:
    """An optional string as record.lua's ``opt`` reads it."""
    return "" if value is None else "=" + value


def opt_bytes(value: bytes | None) -> bytes:
    return b"" if value is None else b"=" + value


def seconds(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _cut(reply: bytes, start: int, length: bytes) -> tuple[bytes | None, int]:
    if length == b"-":
        return None, start
    end = start + int(length)
    return reply[start:end], end


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def decode(
    scope: str, key: str, reply: bytes, result: bytes | None = None, error: bytes | None = None
) -> tuple[int, bytes, Record | None]:
    """A script's reply (see ``reply`` in record.lua): (code, extra, record or None).

    ``result`` / ``error`` stand in for what a script left out because the caller sent it.
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
        _text(fp),
        float(lu) if lu else None,
        result,
        _text(codec),
        error,
        int(a),
        _text(rid),
        float(ca),
        float(ua),
        float(ea) if ea else None,
    )
    return int(code), extra, record


def row(scope: str, key: str, v: Sequence[bytes | None]) -> Record | None:
    """A record from an HMGET of FIELDS; None when it vanished before the read."""
    s, f, o, fp, lu, r, c, e, a, rid, ca, ua, ea = v
    if s is None or f is None or o is None or a is None or ca is None or ua is None:
        return None
    return Record(
        scope,
        key,
        STATUSES[s],
        int(f),
        o.decode(),
        _text(fp),
        None if lu is None else float(lu),
        r,
        _text(c),
        e,
        int(a),
        _text(rid),
        float(ca),
        float(ua),
        None if ea is None else float(ea),
    )


def put_args(r: Record) -> list[str | bytes]:
    """put.lua's arguments: every field in FIELDS order."""
    # repr keeps the durable store's times exact; Lua only compares them.
    return [
        "=" + r.status.value,
        f"={r.fence}",
        "=" + r.owner,
        opt(r.fingerprint),
        opt(_repr(r.lease_until)),
        opt_bytes(r.result),
        opt(r.codec),
        opt_bytes(r.error),
        f"={r.attempts}",
        opt(r.request_id),
        f"={r.created_at!r}",
        f"={r.updated_at!r}",
        opt(_repr(r.expires_at)),
    ]


def _repr(value: float | None) -> str | None:
    return None if value is None else repr(float(value))
