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
import json
import types
import typing
import uuid
from collections.abc import Callable
from typing import Any

from mideng.core.canonical import to_jsonable

Converter = Callable[[Any], Any]


# The same hint object comes back on every replay of a body (the Guard learns it once), so an
# identity lookup answers before the cache has to hash a generic alias like dict[str, str].
BY_ID: dict[int, tuple[Any, Converter]] = {}


def converter(hint: Any) -> Converter:
    known = BY_ID.get(id(hint))
    if known is not None and known[0] is hint:
        return known[1]
    try:
        conv = _cached(hint)
    except TypeError:  # an unhashable hint (rare): compile it every time
        return _build(hint)
    if len(BY_ID) >= 1024:
        BY_ID.clear()
    BY_ID[id(hint)] = (hint, conv)  # the entry holds the hint, so its id can't be reused
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
    if typing.is_typeddict(hint):  # a dict class that refuses isinstance checks
        return _typed_dict(hint)
    if not isinstance(hint, type):
        return _identity
    return _class(hint)


def _none(value: Any) -> None:
    if value is not None:
        raise TypeError("expected null")


def _union(options: tuple[Any, ...]) -> Converter:
    nullable = type(None) in options
    members = [converter(o) for o in options if o is not type(None)]
    if len(members) == 1:  # Optional[X]: nothing to choose between
        only = members[0]

        def convert_optional(value: Any) -> Any:
            if value is None and nullable:
                return None
            try:
                return only(value)
            except (TypeError, ValueError, KeyError) as exc:
                raise TypeError(f"no member of the union fits: {[str(exc)]}") from exc

        return convert_optional

    def convert_union(value: Any) -> Any:
        if value is None and nullable:
            return None
        errors = []
        loose: list[Any] = []
        for member in members:
            try:
                rebuilt = member(value)
            except (TypeError, ValueError, KeyError) as exc:
                errors.append(str(exc))
                continue
            # A dataclass or model member takes any object whose keys it knows and fills the
            # rest from defaults, so an earlier member can accept what a later one stored:
            # the member whose value stores back as exactly what was stored is the one.
            if _stores_as(rebuilt, value):
                return rebuilt
            if not loose:
                loose.append(rebuilt)
        if loose:
            return loose[0]
        raise TypeError(f"no member of the union fits: {errors}")

    return convert_union


def _stores_as(rebuilt: Any, stored: Any) -> bool:
    try:
        return bool(to_jsonable(rebuilt) == stored)
    except (TypeError, ValueError, RecursionError):
        return False


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
    kinds = _LEAVES.get(item)
    if kinds is not None:  # list[str] and the like: check the types in one C pass, no rebuild

        def convert_leaves(value: Any) -> Any:
            if type(value) is not list:
                raise TypeError(f"expected a list, got {type(value).__name__}")
            if not kinds.issuperset(map(type, value)):
                _misfit(value, kinds)
            return build(value)

        return convert_leaves
    return lambda value: build([item(v) for v in value])


def _mapping(key_hint: Any, value_hint: Any) -> Converter:
    key, val = _key(key_hint), converter(value_hint)
    kinds = None if val is _identity else _LEAVES.get(val)
    if key is None and val is _identity:
        return _checked(dict)
    if key is None and kinds is not None:  # dict[str, str] and the like

        def convert_leaves(value: Any) -> Any:
            if type(value) is not dict:
                raise TypeError(f"expected an object, got {type(value).__name__}")
            if not kinds.issuperset(map(type, value.values())):
                _misfit(value.values(), kinds)
            return value  # freshly decoded JSON: nobody else holds it

        return convert_leaves
    rebuild_key = key or _identity
    return lambda value: {rebuild_key(k): val(v) for k, v in value.items()}


# Hints whose values a JSON object key holds as their own string form (the encoder's str(),
# isoformat(), base64), parsed by their converter as they are.
_STRING_FORMS = (str, decimal.Decimal, uuid.UUID, dt.datetime, dt.date, dt.time, bytes)


def _key(hint: Any) -> Converter | None:
    """How a dict key of type ``hint`` comes back from JSON, where object keys are strings;
    None when the string is the key. Numbers, booleans, None, enums and tuples were written
    as JSON text ({1: "a"} is stored as {"1": "a"}): parse the text, then convert it."""
    if hint is str or hint is Any or hint is object:
        return None
    if typing.get_origin(hint) is typing.Literal and all(
        isinstance(a, str) for a in typing.get_args(hint)
    ):
        return None
    conv = converter(hint)
    if hint in _STRING_FORMS:
        return conv

    def parse(text: str) -> Any:
        try:
            return conv(json.loads(text))
        except (ValueError, TypeError, KeyError):
            return conv(text)  # an enum of strings: its value is the text itself

    return parse


def _misfit(values: Any, kinds: frozenset[type]) -> None:
    bad = next(v for v in values if type(v) not in kinds)
    expected = " or ".join(sorted(k.__name__ for k in kinds))
    raise TypeError(f"expected {expected}, got {type(bad).__name__}: {bad!r}")


# Converters that only check the type of a value JSON already decoded: the exact types JSON
# decoding produces that each accepts (an int field takes a bool, as isinstance does).
_LEAVES: dict[Converter, frozenset[type]] = {}
_LEAF_KINDS = {bool: frozenset({bool}), str: frozenset({str}), int: frozenset({int, bool})}


def _checked(cls: type) -> Converter:
    def exact(value: Any) -> Any:
        if not isinstance(value, cls):
            raise TypeError(f"expected {cls.__name__}, got {type(value).__name__}")
        return value

    if cls in _LEAF_KINDS:
        _LEAVES[exact] = _LEAF_KINDS[cls]
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
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):  # a NamedTuple: stored as a list
        return _named_tuple(cls)
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


def _named_tuple(cls: type) -> Converter:
    items: list[Converter] = []

    def convert_named_tuple(value: Any) -> Any:
        if type(value) is not list:
            raise TypeError(f"expected a list for {cls.__name__}, got {type(value).__name__}")
        if not items:  # resolved on first use, as a dataclass's fields are
            hints = typing.get_type_hints(cls)
            items.extend(converter(hints.get(name, Any)) for name in cls._fields)  # type: ignore[attr-defined]
        return cls(*(conv(v) for conv, v in zip(items, value, strict=True)))

    return convert_named_tuple


def _typed_dict(cls: Any) -> Converter:
    fields: dict[str, Converter] = {}

    def convert_typed_dict(value: Any) -> Any:
        if type(value) is not dict:
            raise TypeError(f"expected an object for {cls.__name__}, got {type(value).__name__}")
        if not fields:  # resolved on first use, as a dataclass's fields are
            fields.update(
                (name, converter(hint)) for name, hint in typing.get_type_hints(cls).items()
            )
        return {k: fields[k](v) if k in fields else v for k, v in value.items()}

    return convert_typed_dict
