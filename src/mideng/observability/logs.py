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
