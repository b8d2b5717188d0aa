"""The request id of the current call chain, kept in a contextvar.

It traces a call (logs, stored records, outgoing headers); it never dedupes: the key does that.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar, Token

_request_id: ContextVar[str | None] = ContextVar("mideng_request_id", default=None)

#: The current request id, or None. The ContextVar's own method: every guarded call asks.
get_request_id: Callable[[], str | None] = _request_id.get


def set_request_id(request_id: str | None) -> None:
    _request_id.set(request_id)


#: ``request_id_scope`` without the context manager, for the HTTP middlewares' per-request
#: path: ``token = enter_request_id(id)``, then ``leave_request_id(token)`` in a ``finally``.
enter_request_id: Callable[[str | None], Token[str | None]] = _request_id.set
leave_request_id: Callable[[Token[str | None]], None] = _request_id.reset


@contextlib.contextmanager
def request_id_scope(request_id: str | None) -> Iterator[str | None]:
    token = _request_id.set(request_id)
    try:
        yield request_id
    finally:
        _request_id.reset(token)
