"""The lines of a guarded call: the Guard, its heartbeats, the stores, HTTP, the operator
views and recoverable operations."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from mideng.errors import IdempotencyError, LeaseLostError, StoreUnavailableError
from mideng.observability import watch
from mideng.observability.logs.fields import contained, fields, http_log, log, unwritten


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


# The "mideng" logger's level cache (CPython's Logger keeps one dict for its life and clears it
# in place when any level changes); None on a logging module that keeps none.
_CACHE: dict[int, bool] | None = getattr(log, "_cache", None)
if type(_CACHE) is not dict:
    _CACHE = None


# -- the Guard --------------------------------------------------------------------------------
def duplicate(call: CallLike) -> None:
    """Log the first sighting of a duplicate for this call (not every poll while waiting)."""
    claim = call.duplicate
    if claim is None or call.polls > 1 or log.disabled:
        return
    # log.isEnabledFor(WARNING), its usual case read in place: the answer the logger keeps in
    # its own cache (cleared by logging whenever a level changes), the method called only to
    # fill it. Every duplicate asks, and the method is a Python frame the raw scheme never pays.
    # A stale "on" could only cost the line's arguments: log.warning asks the logger again.
    enabled = _CACHE.get(logging.WARNING) if _CACHE is not None else None
    if enabled is None:
        enabled = log.isEnabledFor(logging.WARNING)
    if not enabled:
        return
    outcome = claim.outcome.value
    # As every line (fields.contained), spelt inline: a frame less per duplicate. Written
    # after the claim answered and before its replay is returned, so what an application's
    # filter or handler raises here would turn the replay into an error.
    try:
        log.warning(
            "mideng duplicate scope=%s key=%s outcome=%s request_id=%s first_request_id=%s",
            call.scope,
            call.key,
            outcome,
            call.request_id,
            claim.record.request_id,
            extra=fields(call.scope, call.key, outcome, call.request_id),
        )
    except Exception:
        unwritten()


@contained
def fail_open(call: CallLike, exc: StoreUnavailableError, step: str) -> None:
    if watch.metrics is not None:
        watch.metrics.fail_open(call.scope, step)
    if watch.on is not None:
        watch.on.fail_open(step)
    log.warning(
        "mideng store unavailable at %s; %s:%s runs unguarded (fail_open): %s",
        step,
        call.scope,
        call.key,
        exc,
        extra=fields(call.scope, call.key, "fail_open", call.request_id),
    )


@contained
def unsettled(call: CallLike, exc: BaseException, store_exc: IdempotencyError) -> None:
    log.warning(
        "mideng could not settle %s:%s after %s: %s",
        call.scope,
        call.key,
        type(exc).__name__,
        store_exc,
        extra=fields(call.scope, call.key, "unsettled", call.request_id),
    )


@contained
def settled_again(call: CallLike, op: str, tries: int) -> None:
    """A settling write the store failed once was made again (its body ran once)."""
    log.warning(
        "mideng: %s of %s:%s made on try %d after the store failed it",
        op,
        call.scope,
        call.key,
        tries + 1,
        extra=fields(call.scope, call.key, "settled_again", call.request_id),
    )


@contained
def rollback_failed(exc: Exception) -> None:
    log.warning("mideng could not roll back the transactional block: %s", exc, extra=fields())


@contained
def span_failed(span: str, step: str, exc: Exception) -> None:
    """The tracer (a span processor, sampler or exporter of the application's) raised; the
    call went on, that span left unrecorded or unended."""
    log.warning(
        "mideng tracing failed at %s %s, the call goes on: %s: %s",
        span,
        step,
        type(exc).__name__,
        exc,
        extra=fields(outcome="span_failed"),
    )


# -- heartbeats: ``what`` names the claim (a Ticket from the Guard; anything printable) -------
def _claim(what: object) -> str:
    scope, key, fence = (getattr(what, name, None) for name in ("scope", "key", "fence"))
    return f"{scope}:{key} fence={fence}" if scope is not None else repr(what)


@contained
def heartbeat_failed(
    what: object, exc: Exception, failures: int, remaining: float, delay: float
) -> None:
    if watch.metrics is not None:
        watch.metrics.heartbeat_failed(_where(what)[0] or "")
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


@contained
def heartbeat_lapsed(what: object, exc: Exception, failures: int) -> None:
    log.error(
        "mideng heartbeat of %s could not renew before its lease ran out (%d failures, last "
        "%s: %s): another caller may take over; this holder's completion is fenced and "
        "renewal goes on",
        _claim(what),
        failures,
        type(exc).__name__,
        exc,
        extra=fields(*_where(what), "heartbeat_lapsed"),
    )


@contained
def heartbeat_recovered(what: object, failures: int, lapsed: bool) -> None:
    log.warning(
        "mideng heartbeat of %s renewed again after %d failures%s",
        _claim(what),
        failures,
        " (its lease had run out meanwhile)" if lapsed else "",
        extra=fields(*_where(what), "heartbeat_recovered"),
    )


@contained
def heartbeat_lost(what: object, exc: Exception) -> None:
    log.warning(
        "mideng heartbeat of %s stopped, its lease is lost: %s",
        _claim(what),
        exc,
        extra=fields(*_where(what), "lease_lost"),
    )


@contained
def heartbeat_thread_died(exc: BaseException) -> None:
    log.error("mideng heartbeat timer died and is restarted", exc_info=exc, extra=fields())


# -- stores -----------------------------------------------------------------------------------
@contained
def checkpoint_failed(path: str, exc: Exception) -> None:
    """A SQLite store's passive checkpoint failed; the next one picks up where it stopped."""
    log.warning(
        "mideng: SQLite store %s: a checkpoint failed: %r",
        path,
        exc,
        extra=fields(outcome="checkpoint_failed"),
    )


@contained
def redis_down(exc: StoreUnavailableError, quiet: int) -> None:
    log.warning(
        "redis unavailable, answering from durable store: %s "
        "(%d more failures since the last warning)",
        exc,
        quiet,
        extra=fields(outcome="redis_unavailable"),
    )


@contained
def redis_copy_kept(scope: str, key: str) -> None:
    log.warning(
        "could not drop the Redis copy of %s:%s; it replays until it expires",
        scope,
        key,
        extra=fields(scope, key, "redis_copy_kept"),
    )


# -- HTTP -------------------------------------------------------------------------------------
@contained
def response_unguarded(max_response: int) -> None:
    http_log.warning(
        "mideng: a streamed or oversized response (max_response=%d) was passed "
        "through unguarded and its key released",
        max_response,
        extra=fields(outcome="unguarded"),
    )


@contained
def response_unstored(exc: Exception) -> None:
    outcome = "lease_lost" if isinstance(exc, LeaseLostError) else "unstored"
    http_log.warning("mideng: response sent but not stored: %s", exc, extra=fields(outcome=outcome))


@contained
def store_io_failed(exc: Exception) -> None:
    """A store's own I/O error, let through unwrapped before the request ran: answered 503."""
    http_log.warning(
        "mideng: store failed before the request ran (answered 503): %r",
        exc,
        extra=fields(outcome="store_unavailable"),
    )


@contained
def token_not_restored(exc: Exception) -> None:
    """A resubmit token could not be given back after the view failed."""
    http_log.warning(
        "mideng: a resubmit token could not be given back after the view failed: %s",
        exc,
        extra=fields(outcome="token_not_restored"),
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


@contained
def survey_failed(store: str, exc: Exception) -> None:
    """A survey for the record gauges failed; the scrape answers with the last good one."""
    log.warning(
        "mideng could not survey the %s store for its record gauges: %s: %s",
        store,
        type(exc).__name__,
        exc,
        extra=fields(outcome="survey_failed"),
    )


# -- recoverable operations (mideng.guard.operations, reconcile, the stale-task scan) ---------
@contained
def steps_kept(scope: str, key: str, exc: BaseException) -> None:
    """The operation completed but its kept steps stayed behind: reconcile drops them."""
    log.warning(
        "operation %s:%s completed, but its kept steps could not be dropped (%r); reconcile "
        "drops them",
        scope,
        key,
        exc,
        extra=fields(scope, key, "steps_kept"),
    )


@contained
def reconcile_failed(scope: str, key: str, exc: BaseException) -> None:
    log.warning(
        "reconcile of %s:%s failed: %r",
        scope,
        key,
        exc,
        extra=fields(scope, key, "reconcile_failed"),
    )


@contained
def stale_task(scope: str, key: str, reason: str) -> None:
    """A task still marked running whose holder stopped renewing or that ran past its limit."""
    log.warning("stale task %s:%s: %s", scope, key, reason, extra=fields(scope, key, "stale"))


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


@contained
def statement_rollback_failed(exc: Exception) -> None:
    """The site's own transaction could not be rolled back after its statement raised; the
    statement's error is raised all the same."""
    log.warning(
        "mideng could not roll back after a failed statement: %s",
        exc,
        extra=fields(outcome="rollback_failed"),
    )
