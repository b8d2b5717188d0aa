"""What the gRPC interceptors share, without I/O: how one unary-unary method is guarded
(``Method``: where its key is, its scope and options), the key read off a call, the
request's fingerprint, the codec that stores a response message as its serialized bytes, and
the status a refusal is answered with.

The key is a field of the request (AIP-155's ``request_id``, the default) or a metadata entry
(``idempotency-key``, say). A request without one runs unguarded, unless the method requires
one (then ``INVALID_ARGUMENT``). A proto3 string field left empty is no key: proto3 cannot
tell it from one not set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as default
from typing import Any

import grpc

from mideng.core.failure import message_of
from mideng.errors import (
    ConfigurationError,
    IdempotencyError,
    InProgressError,
    InvalidKeyError,
    PayloadMismatchError,
    StoreUnavailableError,
    UnresolvedError,
)

#: The trailing metadata entry a replayed response carries.
REPLAYED = "idempotent-replayed"


@dataclass(frozen=True)
class Method:
    """How one method is guarded. ``field``: the request field holding the key (AIP-155's
    ``request_id`` unless ``metadata`` is given), or ``metadata``: the metadata key holding
    it (not both).
    ``required``: a call without a key is refused (``INVALID_ARGUMENT``) instead of run
    unguarded. ``scope``: the record's scope (the method's name, ``package.Service/Method``,
    unless given). ``in_progress``: the status a call gets while the first with its key is
    still running (``ABORTED``: a client's retry policy retries it). ``options``: the scope's
    policy overrides (``lease``, ``ttl``, ``wait`` ...)."""

    field: str | None = None
    metadata: str | None = None
    required: bool = False
    scope: str | None = None
    in_progress: grpc.StatusCode = grpc.StatusCode.ABORTED
    options: Mapping[str, Any] = default(default_factory=dict)

    def __post_init__(self) -> None:
        if self.field is not None and self.metadata is not None:
            raise ConfigurationError("a Method reads its key from a field or from metadata")
        if self.field == "":
            raise ConfigurationError("a field= names the request's field")
        if self.metadata is not None and (
            self.metadata != self.metadata.lower() or self.metadata.endswith("-bin")
        ):
            raise ConfigurationError(
                f"metadata key {self.metadata!r}: gRPC keys are lower case, and a key is text "
                "(not a -bin entry)"
            )

    def request_field(self) -> str | None:
        """The request's field holding the key; None when the key is in metadata."""
        if self.metadata is not None:
            return None
        return self.field if self.field is not None else "request_id"


def scope_of(method: str, rule: Method) -> str:
    return rule.scope if rule.scope is not None else method.lstrip("/")


def key_of(rule: Method, request: Any, metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    """The call's key, or None when it has none; InvalidKeyError when it is not text."""
    if rule.metadata is not None:
        for entry, text in metadata or ():
            if entry == rule.metadata:
                return str(text) if text else None  # text: -bin entries are refused above
        return None
    name = rule.request_field()
    assert name is not None
    try:
        value = getattr(request, name)
    except AttributeError:
        raise ConfigurationError(
            f"{type(request).__name__} has no field {name!r} to read the key from"
        ) from None
    if not isinstance(value, str):
        raise InvalidKeyError(f"field {name!r} holds {type(value).__name__}, not text")
    return value or None


def fingerprinted(request: Any) -> Any:
    """What is fingerprinted of a request: a protobuf message's deterministic serialization
    (map entries in one order, whichever client wrote them), else the request itself."""
    serialize = getattr(request, "SerializeToString", None)
    return serialize(deterministic=True) if serialize is not None else request


class MessageCodec:
    """A response message kept as the bytes its serializer made: replayed as they are."""

    name = "grpc.message"
    raises_codec_error = True

    def encode(self, value: Any) -> bytes:
        return bytes(value)

    def decode(self, data: bytes, type_hint: Any = None) -> Any:
        return data


MESSAGE_CODEC = MessageCodec()


def refusal(exc: IdempotencyError, rule: Method, key: str) -> tuple[grpc.StatusCode, str]:
    """The status and details a call is refused with."""
    if isinstance(exc, InProgressError):
        return rule.in_progress, f"request {key!r} is in progress; retry it"
    if isinstance(exc, PayloadMismatchError):
        return grpc.StatusCode.INVALID_ARGUMENT, (
            f"request id {key!r} was used before with another request"
        )
    if isinstance(exc, InvalidKeyError):
        return grpc.StatusCode.INVALID_ARGUMENT, f"unusable request id: {message_of(exc)}"
    if isinstance(exc, UnresolvedError):
        return grpc.StatusCode.FAILED_PRECONDITION, (
            f"request {key!r} is unresolved: an operator must resolve it"
        )
    if isinstance(exc, StoreUnavailableError):
        return grpc.StatusCode.UNAVAILABLE, "the idempotency store is unavailable"
    return grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {message_of(exc)}"


def missing(rule: Method) -> str:
    name = rule.request_field()
    where = f"field {name!r}" if name is not None else f"metadata {rule.metadata!r}"
    return f"this method needs a request id ({where})"


def streaming(method: str) -> str:
    return (
        f"{method} streams; mideng guards unary-unary methods only (a stream's messages are "
        "not one response to store and replay)"
    )
