"""Who a guarded request belongs to and what it asked for, as the Guard gets them: the scope
made from the application's principal, and the fingerprint's forms of method, path, query and
headers.

Both mappings must be one-to-one. Two principals sharing a scope would read each other's stored
responses; two requests sharing a fingerprint would get each other's response instead of a 422.
So nothing here replaces or drops a character: what has no faithful text form is hashed
(a principal) or spelled as its bytes (a fingerprint field), under a mark that text kept as it
is can never carry.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any, Protocol

from mideng.core.canonical import c_encoder
from mideng.core.keys import MAX_SCOPE_LENGTH, utf8_error

ANONYMOUS = "-"
DIGEST_MARK = "#"
# 160 bits of sha256 leave no collision anyone could find; the digest fits beside the longest
# scope_prefix (MAX_SCOPE_LENGTH // 2), and it is the length long principals were always
# hashed to, so their scopes stay where they were.
_DIGEST_HEX = 40
# Kept as written: no lone surrogate (no store can hold one) and no control character (NUL,
# which PostgreSQL can't hold, or a newline that would forge a line of the duplicate log and
# the operator tools' output). Fixed ranges rather than str.isprintable(), which follows the
# running Python's Unicode tables: a scope must not move with an upgrade.
_READABLE = re.compile("[ -~\u00a0-\ud7ff\ue000-\U0010ffff]+")

Form = str | dict[str, str]


def principal_scope(prefix: str, principal: object) -> str:
    """``<prefix>:<principal>`` for a readable principal that fits, ``<prefix>:-`` for none
    (None or ""), else ``<prefix>:#<sha256, 40 hex>`` of the principal's UTF-8."""
    if principal is None or principal == "":
        return f"{prefix}:{ANONYMOUS}"
    name = str(principal)
    scope = f"{prefix}:{name}"
    # A readable name never starts with the digest mark and is never the anonymous mark, so
    # a principal spelled like either still gets a scope of its own (its digest).
    if (
        len(scope) <= MAX_SCOPE_LENGTH
        and name != ANONYMOUS
        and not name.startswith(DIGEST_MARK)
        and _READABLE.fullmatch(name) is not None
    ):
        return scope
    # surrogatepass: one byte string per code point sequence, lone surrogates included; for
    # any other text it is plain UTF-8, the bytes long principals were always hashed from.
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{prefix}:{DIGEST_MARK}{digest[:_DIGEST_HEX]}"


def text_bytes(value: str) -> bytes:
    """The bytes a decoded string stands for: UTF-8, and each lone surrogate that a
    surrogateescape decode made is its byte again."""
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no decoder makes from bytes: keep it, exactly
        return value.encode("utf-8", "surrogatepass")


def _as_bytes(raw: bytes) -> dict[str, str]:
    # A dict: no str (the form of every other value) can equal it in the canonical JSON.
    return {"bytes": raw.hex()}


def exact(value: str) -> Form:
    """A text field of the fingerprint: itself, or (holding a lone surrogate, which UTF-8 can't
    carry) the bytes it stands for."""
    if value.isascii() or utf8_error(value) is None:
        return value
    return _as_bytes(text_bytes(value))


def path_form(path: str, raw: bytes | None) -> Form:
    """The path in the fingerprint. ``raw``: the path's exact bytes, when the integration has
    them; when they are not UTF-8, the text ``path`` was decoded with replacements (two
    different paths can read the same), so the bytes themselves stand in. A UTF-8 path keeps
    its text, so each integration fingerprints it as before and as the others do."""
    if raw is not None and not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return _as_bytes(raw)
    return exact(path)


# -- the fingerprint -------------------------------------------------------------------------
# What ``mideng.core.canonical`` spells (sorted keys, no spaces, UTF-8, no NaN) for values that
# are plain JSON already, as one C encoder built once: ``json.dumps`` with those options builds
# an encoder object and a C encoder on every call, which is most of a small body's digest.


def _unspellable(value: object) -> Any:
    raise TypeError(f"cannot canonicalise a {type(value).__qualname__}")


def _make_chunks() -> Callable[[Any, int], list[str]]:
    # Plain data decoded from JSON or made here can't contain itself (the C encoder keeps no
    # markers to tell).
    chunks = c_encoder(_unspellable, sort_keys=True)
    if chunks is not None:
        return chunks
    # No C accelerator (PyPy): the encoder object does it all.
    encoder = json.JSONEncoder(
        sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return lambda value, _level: [encoder.encode(value)]


_CHUNKS = _make_chunks()


def canonical(value: Any) -> str:
    return "".join(_CHUNKS(value, 0))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# The C scanner behind json.loads, called directly: loads wraps it in an encoding sniff, a
# decoder object per call (parse_constant) and two whitespace matches.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder(  # type: ignore[attr-defined]
    parse_constant=_reject_constant
).scan_once


def _parse_json(body: bytes) -> Any:
    """``json.loads(body, parse_constant=...)``, the common case without its wrapping."""
    # json.loads reads bytes as UTF-8 unless they start with a BOM or a NUL in the first two
    # bytes (UTF-16/32); an object or array that starts the body at once is UTF-8.
    if len(body) >= 4 and body[0] in b"{[" and body[1]:
        text = body.decode("utf-8", "surrogatepass")  # what json.loads decodes bytes with
        try:
            value, end = _SCAN(text, 0)
        except StopIteration:
            end = -1
        if end == len(text):
            return value
    # Whitespace around the value, another encoding, or not JSON: loads decides, or says why.
    return json.loads(body, parse_constant=_reject_constant)


def _is_json(content_type: str | None) -> bool:
    if content_type == "application/json":  # the usual spelling, without the parse below
        return True
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def body_form(content_type: str | None, body: bytes) -> tuple[str, bytes]:
    """What a body is fingerprinted by: ``("json", its canonical UTF-8)`` for a JSON body (key
    order and whitespace don't matter), else ``("raw", body)``."""
    if body and _is_json(content_type):
        try:
            doc = _parse_json(body)
            return "json", canonical(doc).encode("utf-8")
        except (ValueError, TypeError, RecursionError):
            # Not valid JSON after all (or text UTF-8 can't carry, a UnicodeEncodeError): the
            # raw bytes are the payload.
            pass
    return "raw", body


def body_digest(content_type: str | None, body: bytes) -> str:
    """A body's part of a version-1 fingerprint: ``<kind>:<sha256 of body_form's bytes>``."""
    kind, data = body_form(content_type, body)
    return f"{kind}:{hashlib.sha256(data).hexdigest()}"


# A JSON string as the canonical spelling writes it (ensure_ascii off): the C function itself.
_string: Callable[[str], str] = json.encoder.encode_basestring


def _form(value: Form) -> str:
    return _string(value) if type(value) is str else canonical(value)


def _payload(method: Form, path: Form, query: Form, body: str, headers: str) -> str:
    """The canonical JSON of the payload {"method", "path", "query", "body", "headers"},
    spelled key by key in the canonical order (sorted keys, no spaces) rather than by a walk
    over a dict: ``body`` is plain ASCII, ``headers`` the canonical spelling of the chosen
    headers' forms."""
    return (
        f'{{"body":"{body}","headers":{headers},"method":{_form(method)},'
        f'"path":{_form(path)},"query":{_form(query)}}}'
    )


def request_fingerprint(method: Form, path: Form, query: Form, body: str, headers: str) -> str:
    """The Guard's fingerprint (``mideng.core.canonical.fingerprint``: sha256 of the canonical
    JSON) of the payload, ``body`` a body digest."""
    text = _payload(method, path, query, body, headers)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


#: The ``headers`` of ``request_fingerprint`` when no header is fingerprinted.
NO_HEADERS = canonical({})


def http_fingerprint(
    method: str,
    path: str,
    query: str,
    raw: bytes | None,
    content_type: str | None,
    body: bytes,
    headers: str,
) -> str:
    """Version 1, what records stored before version 2 carry: ``request_fingerprint`` of the
    request's forms and ``body_digest``. ``headers``: the canonical spelling of the chosen
    headers' forms. Made only when a record answers a mismatch (``exchange.legacy``), so it
    takes the plain path."""
    forms = exact(method), path_form(path, raw), exact(query)
    return request_fingerprint(*forms, body_digest(content_type, body), headers)


# -- version 2 --------------------------------------------------------------------------------
#: Starts a version-2 fingerprint (``http_digest``); one without it is version 1
#: (``http_fingerprint``), as records stored before version 2 carry.
V2 = "h2:"


class HashState(Protocol):
    """What ``http_digest`` does with a hashlib object: copy it, add bytes, read the digest."""

    def copy(self) -> HashState: ...

    def update(self, data: bytes, /) -> None: ...

    def hexdigest(self) -> str: ...


# The head's hash state by its fields (http_digest); copies are taken, the kept state is never
# updated, so threads share it (a hashlib object's copy holds its lock).
_HEADS: dict[tuple[str, str, str, str, str, bytes | None], HashState] = {}
_HEADS_KEPT = 1024


def _head(
    kind: str, headers: str, method: str, path: str, query: str, raw: bytes | None
) -> HashState:
    """The hash of a version-2 head: version 1's canonical JSON with the body's kind in place
    of its digest, and a newline."""
    head = _payload(exact(method), path_form(path, raw), exact(query), kind, headers) + "\n"
    return hashlib.sha256(head.encode("utf-8"))


def http_digest(
    method: str,
    path: str,
    query: str,
    raw: bytes | None,
    content_type: str | None,
    body: bytes,
    headers: str,
) -> str:
    """The version-2 fingerprint: one SHA-256 over the request's fields and its body's form,
    where version 1 hashes the body's form and then a text holding that digest (two digests, a
    third of a small request's fingerprint). Two requests share one exactly when they share a
    version-1 fingerprint: the head is version 1's canonical JSON with the body's kind in place
    of its digest, and a newline (which canonical JSON never holds) ends it before the body's
    bytes."""
    kind, data = body_form(content_type, body)
    # The head is the same for every request to one endpoint: its hash state is kept per
    # fields and copied, rather than the fields checked, written, encoded and hashed each time.
    fields = (kind, headers, method, path, query, raw)
    start = _HEADS.get(fields)
    if start is None:
        start = _head(kind, headers, method, path, query, raw)
        if len(_HEADS) >= _HEADS_KEPT:  # paths that carry ids don't repeat: start afresh
            _HEADS.clear()
        _HEADS[fields] = start
    digest = start.copy()
    digest.update(data)
    return V2 + digest.hexdigest()
