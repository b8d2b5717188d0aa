"""The log lines mideng writes on the ``mideng`` logger, in one place.

Every duplicate is a WARNING with scope, key, outcome and both request ids (this call's and
the one that did the work), so a duplicate can be traced back to its first request.
"""

from __future__ import annotations

import logging

from mideng.core.flow import Call
from mideng.errors import IdempotencyError, StoreUnavailableError

log = logging.getLogger("mideng")


def duplicate(call: Call) -> None:
    """Log the first sighting of a duplicate for this call (not every poll while waiting)."""
    claim = call.duplicate
    if claim is None or call.polls > 1 or not log.isEnabledFor(logging.WARNING):
        return
    log.warning(
        "mideng duplicate scope=%s key=%s outcome=%s request_id=%s first_request_id=%s",
        call.scope,
        call.key,
        claim.outcome.value,
        call.request_id,
        claim.record.request_id,
        extra={
            "mideng_scope": call.scope,
            "mideng_key": call.key,
            "mideng_outcome": claim.outcome.value,
        },
    )


def fail_open(call: Call, exc: StoreUnavailableError, step: str) -> None:
    log.warning(
        "mideng store unavailable at %s; %s:%s runs unguarded (fail_open): %s",
        step,
        call.scope,
        call.key,
        exc,
    )


def unsettled(call: Call, exc: BaseException, store_exc: IdempotencyError) -> None:
    log.warning(
        "mideng could not settle %s:%s after %s: %s",
        call.scope,
        call.key,
        type(exc).__name__,
        store_exc,
    )


# -- heartbeats: ``what`` names the claim (a Ticket from the Guard; anything printable) -------
def _claim(what: object) -> str:
    scope, key, fence = (getattr(what, name, None) for name in ("scope", "key", "fence"))
    return f"{scope}:{key} fence={fence}" if scope is not None else repr(what)


def heartbeat_failed(
    what: object, exc: Exception, failures: int, remaining: float, delay: float
) -> None:
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
        )


def heartbeat_lapsed(what: object, exc: Exception, failures: int) -> None:
    log.error(
        "mideng heartbeat of %s could not renew before its lease ran out (%d failures, last "
        "%s: %s): another caller may take over; this holder's completion is fenced and "
        "renewal goes on",
        _claim(what),
        failures,
        type(exc).__name__,
        exc,
    )


def heartbeat_recovered(what: object, failures: int, lapsed: bool) -> None:
    log.warning(
        "mideng heartbeat of %s renewed again after %d failures%s",
        _claim(what),
        failures,
        " (its lease had run out meanwhile)" if lapsed else "",
    )


def heartbeat_lost(what: object, exc: Exception) -> None:
    log.warning("mideng heartbeat of %s stopped, its lease is lost: %s", _claim(what), exc)


def heartbeat_thread_died(exc: BaseException) -> None:
    log.error("mideng heartbeat timer died and is restarted", exc_info=exc)


# -- business tables (mideng.state) ------------------------------------------------------------
def duplicate_insert(table: str, key: dict[str, object]) -> None:
    """An insert_once met a row with the same business key: the retry is answered with that
    row, and the warning carries the key so the duplicate can be traced."""
    if not log.isEnabledFor(logging.WARNING):
        return
    shown = " ".join(f"{name}={value!r}" for name, value in key.items())
    log.warning(
        "mideng duplicate insert table=%s %s: the existing row is returned",
        table,
        shown,
        extra={"mideng_table": table, "mideng_key": key},
    )
