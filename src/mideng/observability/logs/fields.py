"""The loggers mideng writes to, the four fields every one of its lines carries, and the shapes
a line is declared with (``Line``, ``Keyed``, ``Traced``): its logger and level, its outcome,
its text, and how the arguments it is called with fill that text and its fields."""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ParamSpec

from mideng.context import get_request_id

log = logging.getLogger("mideng")
http_log = logging.getLogger("mideng.http")
messaging_log = logging.getLogger("mideng.messaging")
outbox_log = logging.getLogger("mideng.outbox")
jobs_log = logging.getLogger("mideng.jobs")

#: The attributes every mideng record carries; stable names for formatters and queries.
FIELDS = ("mideng_request_id", "mideng_scope", "mideng_key", "mideng_outcome")

P = ParamSpec("P")


def contained(line: Callable[P, None]) -> Callable[P, None]:
    """A log line that never raises into the code writing it.

    logging contains what a stdlib handler's ``emit`` raises (``Handler.handleError``), but a
    filter on a logger or handler, an application's handler whose ``emit`` raises itself, or a
    record factory raise through ``log.warning(...)``. mideng writes its lines where that
    would undo a guarded call's work: a replay or a body that ran turned into an error, an
    async heartbeat stopped mid-body (its lease then runs out and a retry runs the body
    again). So what a line raises is reported as logging reports a handler's failure."""

    @functools.wraps(line)
    def write(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            line(*args, **kwargs)
        except Exception:
            unwritten()

    return write


def unwritten() -> None:
    """A line raised: its traceback on stderr while ``logging.raiseExceptions`` is set (its
    default), as ``Handler.handleError`` does; nothing otherwise."""
    if logging.raiseExceptions:
        with contextlib.suppress(Exception):  # stderr closed or gone: nothing left to tell
            sys.stderr.write("--- mideng: a log line raised ---\n")
            traceback.print_exc(file=sys.stderr)


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


@dataclass(frozen=True, slots=True)
class Shape:
    """What a declared line is made of: ``write``, the logger's method for its level; its
    ``outcome`` field; its ``text``. Like every line it never raises into the code writing it
    (``contained``). Its record's place (``funcName``, ``lineno``) is where it was called."""

    write: Callable[..., None]
    outcome: str | None
    text: str

    def written(
        self,
        args: tuple[object, ...],
        scope: str | None = None,
        key: str | None = None,
        exc: BaseException | None = None,
        request_id: str | None = None,
    ) -> None:
        try:
            extra = fields(scope, key, self.outcome, request_id)
            # stacklevel: the caller of the line, past its __call__ and this method.
            self.write(self.text, *args, exc_info=exc, extra=extra, stacklevel=3)
        except Exception:
            unwritten()


@dataclass(frozen=True, slots=True)
class Line(Shape):
    """A line whose arguments fill its text in order, or as ``fill`` puts them, with its
    outcome as a field (no scope or key):
    ``Line(outbox_log.warning, "polling", "outbox relay cannot LISTEN (%s); ...")(exc)``."""

    fill: Callable[..., tuple[object, ...]] | None = None

    def __call__(self, *args: object) -> None:
        self.written(args if self.fill is None else self.fill(*args))


def with_error_type(*args: object) -> tuple[object, ...]:
    """A ``fill`` for a line whose last argument is an exception that its text shows as
    ``Type: message``: the arguments before it, the exception's type name, the exception."""
    *before, exc = args
    return (*before, type(exc).__name__, exc)


@dataclass(frozen=True, slots=True)
class Keyed(Shape):
    """A line about one record: its first two arguments are the record's scope and key, its
    fields, and fill the text's first two places (``%s:%s``); with ``joined`` they fill its
    first place as one ``scope:key``. The arguments after them fill the rest."""

    joined: bool = False

    def __call__(self, scope: str, key: str, *more: object) -> None:
        where = (f"{scope}:{key}",) if self.joined else (scope, key)
        self.written((*where, *more), scope, key)


@dataclass(frozen=True, slots=True)
class Traced(Shape):
    """A line written with a traceback: its last argument is the exception, the ones before it
    fill its text."""

    def __call__(self, *args: Any) -> None:
        *shown, exc = args
        self.written(tuple(shown), exc=exc)


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


@contextlib.contextmanager
def shown_by(handler: logging.Handler, level: int = logging.WARNING) -> Iterator[None]:
    """mideng's lines from ``level`` up through ``handler`` alone, for a while (the demo's
    terminal): the process's own logging set-up is left as it was, and gets none of them."""
    before = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(before[0])
        log.propagate = before[1]
