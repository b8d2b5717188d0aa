"""The request id of the current call chain, kept in a contextvar.

It traces a call (logs, stored records, outgoing headers); it never dedupes: the key does that.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

_request_id: ContextVar[str | None] = ContextVar("mideng_request_id", default=None)

#: The current request id, or None. The ContextVar's own method: every guarded call asks.
get_request_id: Callable[[], str | None] = _request_id.get


def set_request_id(request_id: str | None) -> None:
    _request_id.set(request_id)


@contextlib.contextmanager
def request_id_scope(request_id: str | None) -> Iterator[str | None]:
    token = _request_id.set(request_id)
    try:
        yield request_id
    finally:
        _request_id.reset(token)
