"""Result codecs: how a body's return value is stored and rebuilt for a replay.

JSON is the default and the only one chosen for you: a stored record must never become a way to
run code, so pickle exists but only when named. The JSON codec rebuilds the declared return type
(dataclasses, pydantic models, datetimes, Decimals, UUIDs, enums, containers of them) from the
function's annotation, so a replay hands back the same type the first call returned.
"""

from __future__ import annotations

import decimal
import json
import pickle
from collections.abc import Callable
from typing import Any, Protocol

from mideng.core.canonical import c_encoder, to_jsonable
from mideng.core.convert import converter
from mideng.errors import CodecError, ConfigurationError


class Codec(Protocol):
    name: str

    # A value it can't encode raises CodecError: the caller records the failure. A codec that
    # is not mideng's own is held to that by ``checked`` (any other error, or a result that
    # is not bytes, becomes a CodecError), or the record would stay processing and its body
    # run again once the lease ran out.
    def encode(self, value: Any) -> bytes: ...

    def decode(self, data: bytes, type_hint: Any = None) -> Any: ...


_ENCODER = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=to_jsonable
)


# _ENCODER's settings as one C encoder, built once (None on PyPy: the encoder object does it
# all); JSONEncoder.encode builds a new one on every call, which is half a small result's
# encoding time.
_CHUNKS = c_encoder(to_jsonable, sort_keys=False)
# The C scanner behind json.loads, called directly: loads wraps it in three Python-level calls
# and two whitespace matches, which is most of a small replay's decoding time.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _loads(text: str) -> Any:
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):  # whitespace around the value, or not JSON: loads says which
        return json.loads(text)
    return value


class JsonCodec:
    name = "json"
    raises_codec_error = True  # keeps the protocol itself: ``checked`` leaves it as it is

    def encode(self, value: Any) -> bytes:
        try:
            try:
                # The C encoder walks plain data itself and hands only the other types
                # (dataclasses, Decimals, ...) to to_jsonable; a dict keyed by such types makes
                # it give up, and the whole value then takes the pure-Python walk.
                text = "".join(_CHUNKS(value, 0)) if _CHUNKS is not None else _ENCODER.encode(value)
            except TypeError:
                text = _ENCODER.encode(to_jsonable(value))
            return text.encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            raise CodecError(
                f"cannot store the result as JSON ({exc}); return JSON-able data, a dataclass "
                "or a pydantic model, or choose a codec explicitly"
            ) from exc

    def decode(self, data: bytes, type_hint: Any = None) -> Any:
        try:
            plain = _loads(data.decode("utf-8"))
        except ValueError as exc:  # UnicodeDecodeError is a ValueError too
            raise CodecError(f"stored result is not valid JSON: {exc}") from exc
        if type_hint is None or type_hint is Any:
            return plain
        try:
            return converter(type_hint)(plain)
        except (TypeError, ValueError, KeyError, decimal.InvalidOperation) as exc:
            raise CodecError(f"stored result does not fit {type_hint!r}: {exc}") from exc


class PickleCodec:
    """Only for trusted stores: unpickling a tampered record runs code."""

    name = "pickle"
    raises_codec_error = True

    def encode(self, value: Any) -> bytes:
        try:
            return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            # pickle's own errors (PicklingError for a lambda, AttributeError for a local
            # object, TypeError for a lock, whatever a __reduce__ raises), as the CodecError
            # every caller of a codec handles: raised as they were, the body's result was
            # neither stored nor recorded as failed, and its record stayed processing until a
            # take-over ran the body again.
            raise CodecError(f"result can't be pickled: {exc}") from exc

    def decode(self, data: bytes, type_hint: Any = None) -> Any:
        try:
            return pickle.loads(data)
        except Exception as exc:  # a truncated or foreign record: every reader handles this
            raise CodecError(f"stored result can't be unpickled: {exc}") from exc


class CheckedCodec:
    """An application's codec held to the protocol: whatever its ``encode`` or ``decode``
    raises reaches the caller as a CodecError (chained to the original), and an encoding that
    is not bytes is refused (a bytearray or memoryview is copied to bytes). Every caller of a
    codec handles CodecError: the body ran, so its failure is recorded and a duplicate gets
    the same error; another exception would leave the record processing, to be taken over and
    run a second time."""

    __slots__ = ("inner", "name")

    raises_codec_error = True

    def __init__(self, inner: Codec) -> None:
        name = getattr(inner, "name", None)
        if type(name) is not str or not name:
            raise ConfigurationError(f"codec {inner!r} needs a name: a non-empty str")
        self.inner = inner
        self.name = name

    def encode(self, value: Any) -> bytes:
        try:
            data: object = self.inner.encode(value)  # the protocol says bytes; checked here
        except CodecError:
            raise
        except Exception as exc:
            raise CodecError(
                f"codec {self.name!r} failed to encode a {type(value).__name__}: {exc!r}"
            ) from exc
        if type(data) is bytes:
            return data
        if isinstance(data, bytearray | memoryview):
            return bytes(data)
        raise CodecError(f"codec {self.name!r} encoded a {type(data).__name__}, not bytes")

    def decode(self, data: bytes, type_hint: Any = None) -> Any:
        try:
            return self.inner.decode(data, type_hint)
        except CodecError:
            raise
        except Exception as exc:
            raise CodecError(
                f"codec {self.name!r} failed to decode a stored result: {exc!r}"
            ) from exc


def checked(codec: Codec) -> Codec:
    """``codec`` itself when it keeps the protocol (mideng's own say so with a true
    ``raises_codec_error``), else a ``CheckedCodec`` around it."""
    return codec if getattr(codec, "raises_codec_error", False) is True else CheckedCodec(codec)


class UnstoredCodec:
    """What a task (``on_error="retry"``) stores when its body ran and its result could not
    be stored: the codec's error, spelt as a recorded failure, in a completed record. Recorded
    as a failed attempt, the claim rule of every store would grant the next attempt, and run
    the body again; completed, every duplicate gets the error back from ``decode``."""

    name = "mideng.unstored"
    raises_codec_error = True

    def encode(self, value: Any) -> bytes:
        raise CodecError(f"{self.name} holds errors, not results")

    def decode(self, data: bytes, type_hint: Any = None) -> Any:
        from mideng.core.failure import rebuild_failure  # failure imports this module's peers

        error = rebuild_failure(data)
        if isinstance(error, CodecError):
            raise error
        raise CodecError(f"the result of the first run could not be stored: {error}") from error


JSON_CODEC: Codec = JsonCodec()
UNSTORED = UnstoredCodec.name
_CODECS: dict[str, Codec] = {"json": JSON_CODEC, "pickle": PickleCodec(), UNSTORED: UnstoredCodec()}


def register_codec(codec: Codec) -> None:
    """Make ``codec`` known by its name (records name the codec that wrote them)."""
    codec = checked(codec)
    _CODECS[codec.name] = codec


def get_codec(codec: str | Codec) -> Codec:
    if not isinstance(codec, str):
        return checked(codec)
    try:
        return _CODECS[codec]
    except KeyError:
        raise ConfigurationError(
            f"unknown codec {codec!r}; known: {sorted(_CODECS)} (register_codec adds one)"
        ) from None
