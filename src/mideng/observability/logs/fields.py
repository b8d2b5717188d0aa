"""The loggers mideng writes to and the four fields every one of its lines carries."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

from mideng.context import get_request_id

log = logging.getLogger("mideng")
http_log = logging.getLogger("mideng.http")
messaging_log = logging.getLogger("mideng.messaging")
outbox_log = logging.getLogger("mideng.outbox")

#: The attributes every mideng record carries; stable names for formatters and queries.
FIELDS = ("mideng_request_id", "mideng_scope", "mideng_key", "mideng_outcome")


def fields(
    scope: str | None = None,
    key: str | None = None,
    outcome: str | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """The ``extra=`` of a line: the four fields, the request id from the context by default."""
    return {
        "mideng_request_id": request_id if request_id is not None else get_request_id(),
        "mideng_scope": scope,
        "mideng_key": key,
        "mideng_outcome": outcome,
    }


class MidengFields(logging.Filter):
    """Put the four mideng fields on every record that lacks them (the request id from the
    context; the others None), so one format string or JSON schema fits every line.

    ``logging.getLogger().handlers[0].addFilter(MidengFields())``; with structlog, run it on
    the stdlib handler and add ``structlog.stdlib.ExtraAdder(FIELDS)`` to the chain.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "mideng_request_id", None) is None:
            record.mideng_request_id = get_request_id()
        for name in FIELDS[1:]:
            if not hasattr(record, name):
                setattr(record, name, None)
        return True


@contextlib.contextmanager
def to_stderr() -> Iterator[None]:
    """mideng's lines on stderr for a while (an operator command), unless the application set
    up logging itself; stdout stays the command's own output, parseable under --json."""
    if log.handlers or logging.getLogger().handlers:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
