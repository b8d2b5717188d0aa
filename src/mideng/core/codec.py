"""Result codecs: how a body's return value is stored and rebuilt for a replay.

JSON is the default and the only one chosen for you: a stored record must never become a way to
run code, so pickle exists but only when named. The JSON codec rebuilds the declared return type
(dataclasses, pydantic models, datetimes, Decimals, UUIDs, enums, containers of them) from the
function's annotation, so a replay hands back the same type the first call returned.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import json
import pickle
import types
import typing
import uuid
from typing import Any, Protocol

from mideng.core.canonical import to_jsonable
from mideng.errors import CodecError, ConfigurationError


class Codec(Protocol):
    name: str

    def encode(self, value: Any) -> bytes: ...

    def decode(self, data: bytes, type_hint: Any = None) -> Any: ...


class JsonCodec:
    name = "json"

    def encode(self, value: Any) -> bytes:
        try:
            return json.dumps(
                to_jsonable(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False
            ).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise CodecError(
                f"cannot store the result as JSON ({exc}); return JSON-able data, a dataclass "
                "or a pydantic model, or choose a codec explicitly"
            ) from exc

    def decode(self, data: bytes, type_hint: Any = None) -> Any:
        try:
            plain = json.loads(data)
        except ValueError as exc:
            raise CodecError(f"stored result is not valid JSON: {exc}") from exc
        if type_hint is None or type_hint is Any:
            return plain
        try:
            return convert(plain, type_hint)
        except (TypeError, ValueError, KeyError, decimal.InvalidOperation) as exc:
            raise CodecError(f"stored result does not fit {type_hint!r}: {exc}") from exc


class PickleCodec:
    """Only for trusted stores: unpickling a tampered record runs code."""

    name = "pickle"

    def encode(self, value: Any) -> bytes:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def decode(self, data: bytes, type_hint: Any = None) -> Any:
        return pickle.loads(data)


_CODECS: dict[str, Codec] = {"json": JsonCodec(), "pickle": PickleCodec()}


def register_codec(codec: Codec) -> None:
    _CODECS[codec.name] = codec


def get_codec(codec: str | Codec) -> Codec:
    if not isinstance(codec, str):
        return codec
    try:
        return _CODECS[codec]
    except KeyError:
        raise ConfigurationError(
            f"unknown codec {codec!r}; known: {sorted(_CODECS)} (register_codec adds one)"
        ) from None


def convert(value: Any, hint: Any) -> Any:
    """Rebuild ``hint`` from plain JSON data."""
    origin = typing.get_origin(hint)
    if hint is Any or hint is object:
        return value
    if origin is typing.Union or origin is types.UnionType:
        return _convert_union(value, typing.get_args(hint))
    if origin is typing.Literal:
        return value
    if origin in (list, set, frozenset, typing.Sequence, tuple) or hint in (list, set, tuple):
        return _convert_sequence(value, hint, origin)
    if origin in (dict, typing.Mapping) or hint is dict:
        args = typing.get_args(hint) or (Any, Any)
        return {convert(k, args[0]): convert(v, args[1]) for k, v in value.items()}
    if hint is None or hint is type(None):
        if value is not None:
            raise TypeError("expected null")
        return None
    if not isinstance(hint, type):
        return value
    return _convert_class(value, hint)


def _convert_union(value: Any, options: tuple[Any, ...]) -> Any:
    if value is None and type(None) in options:
        return None
    errors = []
    for option in options:
        if option is type(None):
            continue
        try:
            return convert(value, option)
        except (TypeError, ValueError, KeyError) as exc:
            errors.append(str(exc))
    raise TypeError(f"no member of the union fits: {errors}")


def _convert_sequence(value: Any, hint: Any, origin: Any) -> Any:
    args = typing.get_args(hint)
    container = origin or hint
    if container is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(convert(v, args[0]) for v in value)
        if args:
            return tuple(convert(v, a) for v, a in zip(value, args, strict=True))
        return tuple(value)
    item = args[0] if args else Any
    items = [convert(v, item) for v in value]
    if container in (set, frozenset):
        return container(items)
    return items


def _convert_class(value: Any, cls: type) -> Any:
    if cls is bool or cls is str or cls is int:
        if not isinstance(value, cls):
            raise TypeError(f"expected {cls.__name__}, got {type(value).__name__}")
        return value
    if cls is float:
        return float(value)
    if issubclass(cls, enum.Enum):
        return cls(value)
    if cls is dt.datetime:
        return dt.datetime.fromisoformat(value)
    if cls is dt.date:
        return dt.date.fromisoformat(value)
    if cls is dt.time:
        return dt.time.fromisoformat(value)
    if cls is dt.timedelta:
        return dt.timedelta(seconds=value)
    if cls is decimal.Decimal:
        return decimal.Decimal(value)
    if cls is uuid.UUID:
        return uuid.UUID(value)
    if cls is bytes:
        return base64.b64decode(value)
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls)
        kwargs = {
            f.name: convert(value[f.name], hints.get(f.name, Any))
            for f in dataclasses.fields(cls)
            if f.init and f.name in value
        }
        return cls(**kwargs)
    validate = getattr(cls, "model_validate", None)
    if callable(validate):
        return validate(value)
    if isinstance(value, cls):
        return value
    raise TypeError(f"cannot rebuild {cls.__qualname__} from JSON")
