"""Where a guarded call meets a store error: the one place both drivers hand every such error.

Whether the call goes on is ``core.settle.tolerated``'s decision; this module carries it out
(the log line) and tells the driver whether to raise.
"""

from __future__ import annotations

from mideng.core.flow import Call
from mideng.core.settle import Settle, tolerated
from mideng.errors import IdempotencyError
from mideng.observability import logs


def store_error(call: Call, step: Settle | None, exc: IdempotencyError) -> bool:
    """A store error met by ``call`` (at the claim when ``step`` is None, else while settling):
    True when the call goes on, logged; False when the driver raises it."""
    if not tolerated(call.policy, step, exc):
        return False
    if step is None or step.error is None:
        logs.fail_open(call, exc, "claim" if step is None else "complete")  # type: ignore[arg-type]
    else:
        logs.unsettled(call, step.error, exc)
    return True


def at_claim(call: Call, exc: IdempotencyError) -> bool:
    """``store_error`` at the claim: True when the call goes on unguarded (``fail_open``)."""
    return store_error(call, None, exc)
