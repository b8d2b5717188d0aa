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
import re

from mideng.core.keys import MAX_SCOPE_LENGTH

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
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _as_bytes(text_bytes(value))
    return value


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
