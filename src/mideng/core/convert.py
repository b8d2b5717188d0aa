"""Rebuild a declared type from plain JSON data, for replays.

Each type hint is compiled once into a converter function (cached), so a replay of a
``list[Receipt]`` walks prepared field converters instead of re-inspecting types per value.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import functools
import types
import typing
import uuid
from collections.abc import Callable
from typing import Any

Converter = Callable[[Any], Any]


def convert(value: Any, hint: Any) -> Any:
    return converter(hint)(value)


# The same hint object comes back on every replay of a body (the Guard learns it once), so an
# identity lookup answers before the cache has to hash a generic alias like dict[str, str].
_BY_ID: dict[int, tuple[Any, Converter]] = {}


def converter(hint: Any) -> Converter:
    known = _BY_ID.get(id(hint))
    if known is not None and known[0] is hint:
        return known[1]
    try:
        conv = _cached(hint)
    except TypeError:  # an unhashable hint (rare): compile it every time
        return _build(hint)
    if len(_BY_ID) >= 1024:
        _BY_ID.clear()
    _BY_ID[id(hint)] = (hint, conv)  # the entry holds the hint, so its id can't be reused
    return conv


@functools.lru_cache(maxsize=1024)
def _cached(hint: Any) -> Converter:
    return _build(hint)


def _identity(value: Any) -> Any:
    return value


def _build(hint: Any) -> Converter:
    if hint is Any or hint is object:
        return _identity
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return _union(args)
    if origin is typing.Literal:
        return _identity
    if origin is tuple or hint is tuple:
        return _tuple(args)
    if origin in (list, set, frozenset, typing.Sequence) or hint in (list, set, frozenset):
        return _collection(origin or hint, args[0] if args else Any)
    if origin in (dict, typing.Mapping) or hint is dict:
        return _mapping(*(args or (Any, Any)))
    if hint is None or hint is type(None):
        return _none
    if not isinstance(hint, type):
        return _identity
    return _class(hint)


def _none(value: Any) -> None:
    if value is not None:
        raise TypeError("expected null")


def _union(options: tuple[Any, ...]) -> Converter:
    nullable = type(None) in options
    members = [converter(o) for o in options if o is not type(None)]

    def convert_union(value: Any) -> Any:
        if value is None and nullable:
            return None
        errors = []
        for member in members:
            try:
                return member(value)
            except (TypeError, ValueError, KeyError) as exc:
                errors.append(str(exc))
        raise TypeError(f"no member of the union fits: {errors}")

    return convert_union


def _tuple(args: tuple[Any, ...]) -> Converter:
    if len(args) == 2 and args[1] is Ellipsis:
        item = converter(args[0])
        return lambda value: tuple(item(v) for v in value)
    if args:
        items = [converter(a) for a in args]
        return lambda value: tuple(c(v) for c, v in zip(items, value, strict=True))
    return tuple


def _collection(container: Any, item_hint: Any) -> Converter:
    item = converter(item_hint)
    build: Callable[[list[Any]], Any] = container if container in (set, frozenset) else list
    if item is _identity:
        return build
    leaf = _LEAVES.get(item)
    if leaf is not None:  # list[str] and the like: check, don't rebuild item by item

        def convert_leaves(value: Any) -> Any:
            for v in value:
                if not isinstance(v, leaf):
                    raise TypeError(f"expected {leaf.__name__}, got {type(v).__name__}")
            return build(value)

        return convert_leaves
    return lambda value: build([item(v) for v in value])


def _mapping(key_hint: Any, value_hint: Any) -> Converter:
    key, val = converter(key_hint), converter(value_hint)
    if key is _identity and val is _identity:
        return _checked(dict)
    key_leaf = object if key is _identity else _LEAVES.get(key)
    val_leaf = object if val is _identity else _LEAVES.get(val)
    if key_leaf is not None and val_leaf is not None:  # dict[str, str] and the like

        def convert_leaves(value: Any) -> Any:
            if not isinstance(value, dict):
                raise TypeError(f"expected dict, got {type(value).__name__}")
            for k, v in value.items():
                if not isinstance(k, key_leaf) or not isinstance(v, val_leaf):
                    raise TypeError(f"unexpected item {k!r}: {v!r}")
            return value  # freshly decoded JSON: nobody else holds it

        return convert_leaves
    return lambda value: {key(k): val(v) for k, v in value.items()}


# Converters that only check the type of a value JSON already decoded, by the type.
_LEAVES: dict[Converter, type] = {}


def _checked(cls: type) -> Converter:
    def exact(value: Any) -> Any:
        if not isinstance(value, cls):
            raise TypeError(f"expected {cls.__name__}, got {type(value).__name__}")
        return value

    if cls in (bool, str, int):
        _LEAVES[exact] = cls
    return exact


_SIMPLE: dict[type, Converter] = {
    float: float,
    dt.datetime: dt.datetime.fromisoformat,
    dt.date: dt.date.fromisoformat,
    dt.time: dt.time.fromisoformat,
    dt.timedelta: lambda v: dt.timedelta(seconds=v),
    decimal.Decimal: decimal.Decimal,
    uuid.UUID: uuid.UUID,
    bytes: base64.b64decode,
}


def _class(cls: type) -> Converter:
    if cls in (bool, str, int):
        return _checked(cls)
    if cls in _SIMPLE:
        return _SIMPLE[cls]
    if issubclass(cls, enum.Enum):
        return cls
    if dataclasses.is_dataclass(cls):
        return _dataclass(cls)
    validate = getattr(cls, "model_validate", None)
    if callable(validate):  # pydantic v2
        return validate  # type: ignore[no-any-return]
    return _checked(cls)


def _dataclass(cls: type) -> Converter:
    fields: list[tuple[str, Converter]] = []

    def convert_dataclass(value: Any) -> Any:
        if not fields:  # resolved on first use, so self-referencing dataclasses work
            hints = typing.get_type_hints(cls)
            fields.extend(
                (f.name, converter(hints.get(f.name, Any)))
                for f in dataclasses.fields(cls)
                if f.init
            )
        return cls(**{name: conv(value[name]) for name, conv in fields if name in value})

    return convert_dataclass
