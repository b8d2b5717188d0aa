"""Canonical JSON: one byte string per logical value, for fingerprints and keys.

Dict key order and whitespace never matter; dataclasses, pydantic models, datetimes, Decimals,
UUIDs, enums, sets and bytes all have one spelling. Floats that JSON can't carry (NaN, inf) are
refused rather than silently rewritten.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import hashlib
import json
import math
import uuid
from collections.abc import Callable, Mapping
from typing import Any


def to_jsonable(value: Any) -> Any:
    """Turn a value into plain JSON types (dict/list/str/int/float/bool/None)."""
    # The exact plain types first, each into the branch below it would reach anyway: most
    # values are these, and the Mapping test below is an ABC check, slow for everything else.
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is dict:
        return {_key(k): to_jsonable(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [to_jsonable(v) for v in value]
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"cannot canonicalise non-finite float {value!r}")
        return value
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, Mapping):
        return {_key(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_jsonable(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise TypeError(f"cannot canonicalise non-finite Decimal {value!r}")
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):  # pydantic v2, without importing it
        return to_jsonable(model_dump(mode="json"))
    raise TypeError(f"cannot canonicalise a {type(value).__qualname__}")


def _key(k: Any) -> str:
    if isinstance(k, str):
        return k
    plain = to_jsonable(k)
    return plain if isinstance(plain, str) else json.dumps(plain, sort_keys=True)


def canonical_bytes(value: Any) -> bytes:
    """The canonical spelling; TypeError for anything without one (callers catch only that).

    A value that contains itself, or nests deeper than the interpreter recurses, has none, and
    neither has text with a lone surrogate (badly decoded input): UTF-8 can't carry it.
    """
    try:
        plain = to_jsonable(value)
    except RecursionError:
        raise TypeError("the value contains itself or nests too deeply") from None
    return plain_canonical_bytes(plain)


def plain_canonical_bytes(value: Any) -> bytes:
    """``canonical_bytes`` of a value that is plain JSON already, as ``json.loads`` returns it
    (dicts keyed by text, lists, text, numbers, booleans, None): the same bytes without the
    walk. ValueError for a float JSON can't carry, TypeError as ``canonical_bytes``."""
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8")
    except RecursionError:
        raise TypeError("the value nests too deeply") from None
    except UnicodeEncodeError as exc:
        raise TypeError(f"the value holds text UTF-8 can't encode ({exc.reason})") from None


def c_encoder(
    default: Callable[[Any], Any], *, sort_keys: bool
) -> Callable[[Any, int], list[str]] | None:
    """The compact JSON spelling (no spaces, text as UTF-8 rather than escaped, no NaN), keys
    sorted or not, ``default`` spelling what JSON has no form for, as one C encoder built once:
    ``json.dumps`` and ``JSONEncoder.encode`` build a new one on every call, most of a small
    value's encoding time. Called as ``"".join(encoder(value, 0))``; None without the C
    accelerator (PyPy). It keeps no markers dict (one shared by threads would see a value two
    threads encode at once as circular), so a circular value ends in RecursionError instead of
    ValueError."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    return make(  # type: ignore[no-any-return]
        None,
        default,
        json.encoder.c_encode_basestring,  # type: ignore[attr-defined]
        None,
        ":",
        ",",
        sort_keys,
        False,
        False,
    )


def fingerprint(value: Any) -> str:
    """sha256 of the canonical JSON, hex. Same logical payload, same fingerprint."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()
