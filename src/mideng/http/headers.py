"""Request headers as the HTTP core reads them: one lookup per field read, repeated fields
joined, and ASGI's byte pairs decoded only when a field is read."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

__all__ = ["Headers"]


class Headers:
    """Request headers as (lower-case name, value); repeated fields join with ", "."""

    __slots__ = ("_joined", "_pairs")

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        self._pairs = pairs = [(name.lower(), value) for name, value in pairs]
        # Each request reads a few of them (the key, the type, the length): one pass here, a
        # lookup each, rather than a scan of every field per read.
        joined = dict(pairs)
        if len(joined) < len(pairs):  # a repeated field: join its values in order
            joined = {}
            for name, value in pairs:
                joined[name] = f"{joined[name]}, {value}" if name in joined else value
        self._joined = joined

    @classmethod
    def of_bytes(cls, raw: Iterable[tuple[bytes, bytes]]) -> Headers:
        """Headers from a server's (name, value) bytes, as ASGI has them; each is decoded as
        latin-1 when it is read."""
        pairs = raw if isinstance(raw, list) else list(raw)
        try:
            fields = dict(pairs)
        except TypeError:  # a bytearray name (unhashable), as a layer in front may hand on:
            fields = {}  # the general path decodes it like bytes, rather than a 500
        # One lower-case name per field, as ASGI servers send them: values are looked up as
        # bytes and decoded when read. Anything else (a repeated field, a name with upper-case
        # letters, a bytearray) takes the general path.
        if len(fields) == len(pairs) and b"".join(fields).islower():
            return _BytesHeaders(pairs, fields)
        return cls([(k.decode("latin-1"), v.decode("latin-1")) for k, v in pairs])

    @classmethod
    def of_fields(cls, fields: dict[str, str]) -> Headers:
        """Headers from lower-case names, one value each (as Django's request.headers has
        them): the dict is the lookup, nothing is joined."""
        return _FieldHeaders(fields)

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._joined.get(name.lower(), default)

    def first(self, name: str) -> str | None:
        """The first field's value alone, where ``get`` joins a repeated field's values."""
        name = name.lower()
        return next((v for n, v in self._pairs if n == name), None)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._pairs)


class _FieldHeaders(Headers):
    """Headers.of_fields's: the caller's dict of lower-case names is the lookup."""

    __slots__ = ()

    def __init__(self, fields: dict[str, str]) -> None:
        self._pairs = list(fields.items())
        self._joined = fields


class _BytesHeaders(Headers):
    """Headers.of_bytes's: the server's own list and a dict of it, each value decoded on read."""

    __slots__ = ("_bytes", "_raw")

    def __init__(self, raw: list[tuple[bytes, bytes]], fields: dict[bytes, bytes]) -> None:
        self._raw = raw
        self._bytes = fields

    def get(self, name: str, default: str | None = None) -> str | None:
        key = _NAMES.get(name)
        if key is None:
            try:
                key = name.lower().encode("latin-1")
            except UnicodeEncodeError:  # no field has such a name
                return default
            if len(_NAMES) < _NAMES_KEPT:
                _NAMES[name] = key
        value = self._bytes.get(key)
        return default if value is None else value.decode("latin-1")

    first = get  # one field per name

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter([(k.decode("latin-1"), v.decode("latin-1")) for k, v in self._raw])


# The byte spelling of each name read: a request reads the same few (the key, the type, the
# length, the request id), so each is one lookup rather than a lower() and an encode().
_NAMES: dict[str, bytes] = {}
_NAMES_KEPT = 256
