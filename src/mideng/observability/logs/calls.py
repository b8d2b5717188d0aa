"""The lines of a guarded call: the Guard, its heartbeats, the stores, HTTP, the operator
views and recoverable operations.

A line is declared (``fields.Line`` and its kin, and here the lines about a call or a claim)
with the arguments it takes; one that does more than fill its text and fields (a metric, a
level or an outcome chosen by its arguments, a duplicate's fast path) is a function."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from mideng.errors import IdempotencyError, LeaseLostError, StoreUnavailableError
from mideng.observability import observers
from mideng.observability.logs.fields import (
    Keyed,
    Line,
    Shape,
    Traced,
    contained,
    fields,
    http_log,
    log,
    unwritten,
    with_error_type,
)


class _Claim(Protocol):
    @property
    def outcome(self) -> Any: ...
    @property
    def record(self) -> Any: ...


class CallLike(Protocol):
    """What a log line reads from a guarded call (mideng.core.flow.Call has all of it)."""

    @property
    def scope(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def request_id(self) -> str | None: ...
    @property
    def polls(self) -> int: ...
    @property
    def duplicate(self) -> _Claim | None: ...


def _where(what: object) -> tuple[str | None, str | None]:
    return getattr(what, "scope", None), getattr(what, "key", None)


# -- the Guard --------------------------------------------------------------------------------
class Waiting:
    """Which keys' in-progress duplicates were logged in the last ``window`` seconds.

    Callers that find a key in progress and wait for it (``in_progress="wait"``) come in
    crowds: a payment platform retrying one callback, a load balancer's retries. Each would
    write the same line at once (200 concurrent duplicates, 200 WARNING lines); one line a
    key a window stands for them, and the next says how many it folded in (``folded=N``).
    Replays keep a line each: each is a retry that came after the first had finished.
    ``kept`` keys are remembered, the one seen longest ago forgotten first."""

    def __init__(
        self, window: float = 1.0, kept: int = 4096, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window = window
        self.kept = kept
        self.clock = clock
        self._lock = threading.Lock()
        # (scope, key) -> [when its last line was written, sightings folded since]
        self._keys: OrderedDict[tuple[str, str], list[float]] = OrderedDict()

    def folded(self, scope: str, key: str) -> int | None:
        """None: this sighting is folded into the key's next line. Else the number of earlier
        sightings the line about to be written stands for too."""
        now = self.clock()
        with self._lock:
            seen = self._keys.get((scope, key))
            if seen is not None and now - seen[0] < self.window:
                seen[1] += 1
                return None
            self._keys[(scope, key)] = [now, 0]
            self._keys.move_to_end((scope, key))
            if len(self._keys) > self.kept:
                self._keys.popitem(last=False)
            return 0 if seen is None else int(seen[1])


#: The in-progress duplicates lines are folded by (one per process).
waiting = Waiting()


def duplicate(call: CallLike) -> None:
    """Log the first sighting of a duplicate for this call (not every poll while waiting);
    of the calls that find one key in progress, one line a second (``Waiting``).
    Written after the claim answered and before its replay is returned, so it contains what an
    application's filter or handler raises here (as ``fields.contained`` does for every other
    line): it must not turn the replay into an error."""
    claim = call.duplicate
    if claim is None or call.polls > 1 or not log.isEnabledFor(logging.WARNING):
        return
    outcome = claim.outcome.value
    try:
        text = "mideng duplicate scope=%s key=%s outcome=%s request_id=%s first_request_id=%s"
        values: tuple[object, ...] = (
            call.scope,
            call.key,
            outcome,
            call.request_id,
            claim.record.request_id,
        )
        if outcome == "in_progress":
            folded = waiting.folded(call.scope, call.key)
            if folded is None:
                return
            if folded:
                text, values = text + " folded=%d", (*values, folded)
        log.warning(text, *values, extra=fields(call.scope, call.key, outcome, call.request_id))
    except Exception:
        unwritten()


@contained
def fail_open(call: CallLike, exc: StoreUnavailableError, step: str) -> None:
    if observers.metrics is not None:
        observers.metrics.fail_open(call.scope, step)
    if observers.on is not None:
        observers.on.fail_open(step)
    log.warning(
        "mideng store unavailable at %s; %s:%s runs unguarded (fail_open): %s",
        step,
        call.scope,
        call.key,
        exc,
        extra=fields(call.scope, call.key, "fail_open", call.request_id),
    )


@dataclass(frozen=True, slots=True)
class _OfCall(Shape):
    """A line about a guarded call: called with the call first, whose scope, key and request id
    are its fields; ``fill`` puts the call's and the other arguments in the text."""

    fill: Callable[..., tuple[object, ...]]

    def __call__(self, call: CallLike, *more: object) -> None:
        self.written(self.fill(call, *more), call.scope, call.key, request_id=call.request_id)


unsettled: Callable[[CallLike, BaseException, IdempotencyError], None] = _OfCall(
    log.warning,
    "unsettled",
    "mideng could not settle %s:%s after %s: %s",
    fill=lambda call, exc, store_exc: (call.scope, call.key, type(exc).__name__, store_exc),
)

#: A settling write the store failed once was made again (its body ran once).
settled_again: Callable[[CallLike, str, int], None] = _OfCall(
    log.warning,
    "settled_again",
    "mideng: %s of %s:%s made on try %d after the store failed it",
    fill=lambda call, op, tries: (op, call.scope, call.key, tries + 1),
)

rollback_failed: Callable[[Exception], None] = Line(
    log.warning, None, "mideng could not roll back the transactional block: %s"
)

#: The tracer (a span processor, sampler or exporter of the application's) raised; the call
#: went on, that span left unrecorded or unended.
span_failed: Callable[[str, str, Exception], None] = Line(
    log.warning,
    "span_failed",
    "mideng tracing failed at %s %s, the call goes on: %s: %s",
    fill=with_error_type,
)


# -- heartbeats: ``what`` names the claim (a Ticket from the Guard; anything printable) -------
def _claim(what: object) -> str:
    scope, key, fence = (getattr(what, name, None) for name in ("scope", "key", "fence"))
    return f"{scope}:{key} fence={fence}" if scope is not None else repr(what)


@dataclass(frozen=True, slots=True)
class _OfClaim(Shape):
    """A heartbeat's line about its claim: called with the claim ``what`` first, which its text
    names first and whose scope and key are its fields; the arguments after it fill the rest
    of the text, as ``fill`` puts them."""

    fill: Callable[..., tuple[object, ...]] | None = None

    def __call__(self, what: object, *more: object) -> None:
        shown = more if self.fill is None else self.fill(*more)
        self.written((_claim(what), *shown), *_where(what))


@contained
def heartbeat_failed(
    what: object, exc: Exception, failures: int, remaining: float, delay: float
) -> None:
    if observers.metrics is not None:
        observers.metrics.heartbeat_failed(_where(what)[0] or "")
    # The first failure of a streak is news; the retries after it only while debugging.
    level = logging.WARNING if failures == 1 else logging.DEBUG
    if log.isEnabledFor(level):
        log.log(
            level,
            "mideng heartbeat of %s failed (%d in a row, %.3f s of lease left), retrying in "
            "%.3f s: %s: %s",
            _claim(what),
            failures,
            remaining,
            delay,
            type(exc).__name__,
            exc,
            extra=fields(*_where(what), "heartbeat_failed"),
        )


heartbeat_lapsed: Callable[[object, Exception, int], None] = _OfClaim(
    log.error,
    "heartbeat_lapsed",
    "mideng heartbeat of %s could not renew before its lease ran out (%d failures, last %s: %s): "
    "another caller may take over; this holder's completion is fenced and renewal goes on",
    fill=lambda exc, failures: (failures, type(exc).__name__, exc),
)

heartbeat_recovered: Callable[[object, int, bool], None] = _OfClaim(
    log.warning,
    "heartbeat_recovered",
    "mideng heartbeat of %s renewed again after %d failures%s",
    fill=lambda failures, lapsed: (
        failures,
        " (its lease had run out meanwhile)" if lapsed else "",
    ),
)

heartbeat_lost: Callable[[object, Exception], None] = _OfClaim(
    log.warning, "lease_lost", "mideng heartbeat of %s stopped, its lease is lost: %s"
)

heartbeat_thread_died: Callable[[BaseException], None] = Traced(
    log.error, None, "mideng heartbeat timer died and is restarted"
)


# -- stores -----------------------------------------------------------------------------------
#: A SQLite store's passive checkpoint failed; the next one picks up where it stopped.
checkpoint_failed: Callable[[str, Exception], None] = Line(
    log.warning, "checkpoint_failed", "mideng: SQLite store %s: a checkpoint failed: %r"
)

redis_down: Callable[[StoreUnavailableError, int], None] = Line(
    log.warning,
    "redis_unavailable",
    "redis unavailable, answering from durable store: %s (%d more failures since the last warning)",
)

redis_copy_kept: Callable[[str, str], None] = Keyed(
    log.warning,
    "redis_copy_kept",
    "could not drop the Redis copy of %s:%s; it replays until it expires",
)

#: A survey for the record gauges failed; the scrape answers with the last good one.
survey_failed: Callable[[str, Exception], None] = Line(
    log.warning,
    "survey_failed",
    "mideng could not survey the %s store for its record gauges: %s: %s",
    fill=with_error_type,
)


# -- HTTP -------------------------------------------------------------------------------------
response_unguarded: Callable[[int], None] = Line(
    http_log.warning,
    "unguarded",
    "mideng: a streamed or oversized response (max_response=%d) was passed through unguarded "
    "and its key released",
)


@contained
def response_unstored(exc: Exception) -> None:
    outcome = "lease_lost" if isinstance(exc, LeaseLostError) else "unstored"
    http_log.warning("mideng: response sent but not stored: %s", exc, extra=fields(outcome=outcome))


#: A store's own I/O error, let through unwrapped before the request ran: answered 503.
store_io_failed: Callable[[Exception], None] = Line(
    http_log.warning,
    "store_unavailable",
    "mideng: store failed before the request ran (answered 503): %r",
)

token_not_restored: Callable[[Exception], None] = Line(
    http_log.warning,
    "token_not_restored",
    "mideng: a resubmit token could not be given back after the view failed: %s",
)


# -- operator views ---------------------------------------------------------------------------
@contained
def stuck_record(scope: str, key: str, fence: int, lapsed: float, request_id: str | None) -> None:
    """A processing record whose lease ran out long ago and that nobody took over."""
    log.error(
        "mideng stuck record scope=%s key=%s fence=%d: its lease ran out %.0f s ago and no "
        "caller took it over; resolve or release it (request_id=%s)",
        scope,
        key,
        fence,
        lapsed,
        request_id,
        extra=fields(scope, key, "stuck", request_id),
    )


# -- recoverable operations (mideng.operations: a run, reconcile, the stale-task scan) --------
#: The operation completed but its kept steps stayed behind: reconcile drops them.
steps_kept: Callable[[str, str, BaseException], None] = Keyed(
    log.warning,
    "steps_kept",
    "operation %s:%s completed, but its kept steps could not be dropped (%r); reconcile drops them",
)

reconcile_failed: Callable[[str, str, BaseException], None] = Keyed(
    log.warning, "reconcile_failed", "reconcile of %s:%s failed: %r"
)

#: A task still marked running whose holder stopped renewing or that ran past its limit.
stale_task: Callable[[str, str, str], None] = Keyed(log.warning, "stale", "stale task %s:%s: %s")


# -- business tables (mideng.state) -----------------------------------------------------------
@contained
def duplicate_insert(table: str, key: tuple[str, ...], values: Mapping[str, object]) -> None:
    """An insert_once met a row with the same business key (the columns ``key`` of
    ``values``): the retry is answered with that row, and the warning carries the key so the
    duplicate can be traced."""
    if not log.isEnabledFor(logging.WARNING):
        return
    shown = " ".join(f"{name}={values[name]!r}" for name in key)
    line = fields(table, shown, "duplicate_insert")  # the table is the scope of a business row
    log.warning(
        "mideng duplicate insert table=%s %s: the existing row is returned",
        table,
        shown,
        extra=line,
    )


#: The site's own transaction could not be rolled back after its statement raised; the
#: statement's error is raised all the same.
statement_rollback_failed: Callable[[Exception], None] = Line(
    log.warning, "rollback_failed", "mideng could not roll back after a failed statement: %s"
)
