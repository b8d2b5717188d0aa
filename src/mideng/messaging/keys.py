"""The business key and the request id a consumer reads off a message."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from mideng.context import get_request_id, request_id_scope
from mideng.core.failure import message_of
from mideng.core.keys import check_key, check_text
from mideng.errors import InvalidKeyError
from mideng.messaging.headers import IDEMPOTENCY_KEY, MESSAGE_ID, REQUEST_ID
from mideng.messaging.message import Message

KeyFn = Callable[[Message], "str | None"]


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header by name, exactly or ignoring case (brokers and bridges change the case)."""
    found = headers.get(name)
    if found is not None:
        return found
    for k, v in headers.items():
        if k.lower() == name:
            return v
    return None


def default_key(message: Message) -> str | None:
    """The ``message-id`` header, else the ``idempotency-key`` header.

    mideng's publishers put both on every message. The message id names the event: an outbox
    row keeps its id on every re-publish, while its ``idempotency-key`` is the aggregate the
    row belongs to (``order:123``), shared by all of that order's events, so deduping on it
    would run only the first of them. ``publish()`` without an explicit message id uses the
    business key as the id, so a producer that publishes one business event twice is deduped
    too. A message from another producer dedupes on its ``idempotency-key``; the broker's own
    id is never the default, since a re-publish gets a new one.
    """
    found = header(message.headers, MESSAGE_ID)
    if found:
        return found
    return header(message.headers, IDEMPOTENCY_KEY)


def key_of(message: Message, key: KeyFn) -> str:
    """The checked key; InvalidKeyError (with why) when there is none or it is unusable."""
    try:
        value = key(message)
    except Exception as exc:
        # A str() that raises would escape into the adapter's loop: its type is named instead.
        what = f"{type(exc).__name__}: {message_of(exc)}"
        raise InvalidKeyError(f"the key function raised {what}") from exc
    if value is None or value == "":
        raise InvalidKeyError(
            f"message {message.id!r} has no business key (no {MESSAGE_ID!r} or "
            f"{IDEMPOTENCY_KEY!r} header and no key= function value); it is not run unguarded"
        )
    if not isinstance(value, str):
        raise InvalidKeyError(f"the key function returned {type(value).__name__}, not str")
    return check_key(value)


def request_id_of(message: Message) -> str | None:
    """The ``x-request-id`` header, or None where it is not text every store can hold (a NUL,
    a lone surrogate): it goes into the claim, which such a store would refuse on every
    delivery, and it only traces, so the message runs without it."""
    found = header(message.headers, REQUEST_ID)
    if found is None or (found.isascii() and "\x00" not in found):
        return found
    try:
        return check_text(found, "request id")
    except InvalidKeyError:
        return None


_SAME = contextlib.nullcontext()


def scope_of(request_id: str | None) -> contextlib.AbstractContextManager[Any]:
    # A batch enters each message's request id up to three times; when it is already the
    # current one (most messages carry none, and none is current), entering costs nothing.
    return _SAME if request_id == get_request_id() else request_id_scope(request_id)


def key_as(message: Message, fn: KeyFn, request_id: str | None) -> str:
    """The message's key, read (by a key function that may look) under its request id."""
    if request_id == get_request_id():
        return key_of(message, fn)
    with request_id_scope(request_id):
        return key_of(message, fn)
