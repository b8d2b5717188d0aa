"""Request id through the chain: accepted or made at the edge, then carried everywhere.

The edge (the ASGI / WSGI / Django middleware) accepts a well-formed ``X-Request-Id`` or makes
one, keeps it in a contextvar for the request, and sets it on the response. From there:
``RequestIdFilter`` puts it on log records, the Guard stores it on idempotency records, the
httpx hooks and the requests adapter send it on outgoing calls, and ``message_headers`` /
``from_message_headers`` carry it through a broker. It traces; it never dedupes.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from mideng.context import get_request_id, request_id_scope, set_request_id

if TYPE_CHECKING:
    import httpx
    import requests

__all__ = [
    "REQUEST_ID_HEADER",
    "RequestIdFilter",
    "accept_request_id",
    "add_request_id",
    "aadd_request_id",
    "from_message_headers",
    "get_request_id",
    "httpx_event_hooks",
    "async_httpx_event_hooks",
    "instrument_requests",
    "message_headers",
    "new_request_id",
    "request_id_scope",
    "requests_adapter",
    "set_request_id",
    "valid_request_id",
]

REQUEST_ID_HEADER = "X-Request-Id"
# Ids end up in log lines, headers and store columns: keep them short and free of anything a
# log parser or a header could misread (spaces, quotes, control characters, non-ASCII).
_WELL_FORMED = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")


def valid_request_id(value: object) -> bool:
    return isinstance(value, str) and _WELL_FORMED.fullmatch(value) is not None


class _Ids:
    """Random version-4 UUIDs in hex, what ``uuid.uuid4().hex`` gives, drawn from a batch.

    One ``os.urandom`` call per ``BATCH`` ids, their version and variant bits set for the whole
    batch by two C translations: made one at a time, an id was a bytearray, two item updates
    and a ``hex`` (about 4 thousand instructions) on every request without one. ``next`` on
    the batch's list iterator is one C call (atomic under the GIL, so no two threads get the
    same id); an exhausted batch is replaced (two threads replacing it at once each draw their
    own random batch, so they still share no id). A forked child drops its parent's batch, or
    both would hand out the same ids.
    """

    BATCH = 256

    def __init__(self) -> None:
        self.ids: Iterator[str] = iter(())
        os.register_at_fork(after_in_child=self._drop)

    def _drop(self) -> None:
        self.ids = iter(())

    def refill(self) -> str:
        raw = bytearray(os.urandom(16 * self.BATCH))
        raw[6::16] = raw[6::16].translate(_VERSION_4)
        raw[8::16] = raw[8::16].translate(_VARIANT)
        text = raw.hex()
        ids = iter([text[i : i + 32] for i in range(0, len(text), 32)])
        first = next(ids)
        self.ids = ids
        return first


_VERSION_4 = bytes(b & 0x0F | 0x40 for b in range(256))
_VARIANT = bytes(b & 0x3F | 0x80 for b in range(256))  # the RFC 4122 variant
#: Where fresh request ids come from (``new_request_id``).
IDS = _Ids()


def new_request_id() -> str:
    """A random UUID (version 4) in hex, as ``uuid.uuid4().hex`` gives, without building the
    UUID object and its 128-bit integer (drawn from ``IDS``' batch)."""
    return next(IDS.ids, None) or IDS.refill()


def accept_request_id(value: str | None) -> str:
    """The caller's id when it is well formed, else a fresh one (a bad id is never an error)."""
    if value is not None and valid_request_id(value):
        return value
    return new_request_id()


class RequestIdFilter(logging.Filter):
    """Adds ``record.request_id`` ("-" outside a request); use ``%(request_id)s`` in formats."""

    def __init__(self, name: str = "", attribute: str = "request_id", missing: str = "-"):
        super().__init__(name)
        self.attribute = attribute
        self.missing = missing

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, self.attribute):
            setattr(record, self.attribute, get_request_id() or self.missing)
        return True


# -- outgoing calls ----------------------------------------------------------------------------
def add_request_id(request: httpx.Request) -> None:
    """httpx request hook: ``httpx.Client(event_hooks=httpx_event_hooks())``."""
    request_id = get_request_id()
    if request_id is not None and REQUEST_ID_HEADER not in request.headers:
        request.headers[REQUEST_ID_HEADER] = request_id


async def aadd_request_id(request: httpx.Request) -> None:
    add_request_id(request)


def httpx_event_hooks() -> dict[str, list[Any]]:
    return {"request": [add_request_id]}


def async_httpx_event_hooks() -> dict[str, list[Any]]:
    return {"request": [aadd_request_id]}


@functools.cache
def requests_adapter() -> type[requests.adapters.HTTPAdapter]:
    """An HTTPAdapter that sends the current request id; requests has no request hook."""
    from requests.adapters import HTTPAdapter

    class RequestIdAdapter(HTTPAdapter):
        def add_headers(self, request: requests.PreparedRequest, **kwargs: Any) -> None:
            super().add_headers(request, **kwargs)
            request_id = get_request_id()
            if request_id is not None and REQUEST_ID_HEADER not in request.headers:
                request.headers[REQUEST_ID_HEADER] = request_id

    return RequestIdAdapter


def instrument_requests(session: requests.Session, **adapter_options: Any) -> requests.Session:
    """Mount the request-id adapter for http:// and https:// on ``session``."""
    adapter = requests_adapter()(**adapter_options)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


# -- messages ----------------------------------------------------------------------------------
MESSAGE_HEADER = "x-request-id"


def message_headers(headers: MutableMapping[str, Any] | None = None) -> MutableMapping[str, Any]:
    """Headers for an outgoing message, with the current request id added when there is one."""
    out: MutableMapping[str, Any] = {} if headers is None else headers
    request_id = get_request_id()
    if request_id is not None:
        out.setdefault(MESSAGE_HEADER, request_id)
    return out


def from_message_headers(headers: Mapping[str, Any] | None) -> str | None:
    """The request id a message carried, if well formed (bytes values are decoded)."""
    if not headers:
        return None
    for name, value in headers.items():
        if isinstance(name, str) and name.lower() in (MESSAGE_HEADER, "trace_id"):
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            if valid_request_id(text):
                return str(text)
    return None
