"""A settling write (a completion, a failure recorded, a release) the store failed once.

The body has run. Left processing, its record is taken over once the lease runs out and the
body runs a second time, though its holder never died; a failure meant to be recorded (so it
is not run again) would be run again too. So a write the store failed with
``StoreUnavailableError`` (a connection reset, a failover's first moments, a statement
timeout) is made again, after a short pause that doubles, for up to ``WINDOW`` seconds and
never past a third of the lease (the beat renews a live lease every third, so at least that
much of it was left). Every try is fenced by the claim's (owner, fence), as the first was. A
store down for longer leaves the error standing, as before: the caller gets it.

Made again, a write that had landed, its answer lost on the way back, meets
``LeaseLostError``: the record is read, and if it is settled under this very claim the write
is taken as made. A release meeting it has nothing left to do either way (the key is free, or
someone else holds it after the lease).

Under ``fail_open`` nothing is tried again: that policy goes on at once, unguarded, as it does
at the claim. Only a failing write comes here; a write the store answers never does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

from mideng.core.flow import Call
from mideng.core.record import FAILED, SUCCEEDED, Record, Ticket
from mideng.core.settle import COMPLETE, RELEASE, Settle
from mideng.errors import IdempotencyError, LeaseLostError, StoreUnavailableError
from mideng.guard.cancelled import settle_anyway
from mideng.guard.store_errors import store_error
from mideng.observability import logs

#: The first pause before a write is made again (seconds); each next one doubles.
FIRST_PAUSE = 0.05
#: The longest a write is tried again (seconds): a dropped connection's write goes through on
#: the next one at once, and a caller is not held long past its body by a store that is down.
WINDOW = 1.0


def _pauses(call: Call, exc: IdempotencyError) -> Iterator[float]:
    """The pause before each try of a write the store failed with ``exc``: FIRST_PAUSE,
    doubling, while a try still starts within ``WINDOW`` and a third of the lease (at least
    that much of it was left); none for an answer that is not an outage, or under
    ``fail_open``. Every try but the last failed with StoreUnavailableError (any other
    outcome ends the loop that asks)."""
    if not isinstance(exc, StoreUnavailableError) or call.policy.fail_open:
        return
    window = min(float(call.lease) / 3, WINDOW)
    deadline, pause = time.monotonic() + window, FIRST_PAUSE
    while time.monotonic() + pause < deadline:
        yield pause
        pause = min(pause * 2, window / 4)


def _landed(record: Record | None, ticket: Ticket, step: Settle) -> bool:
    """Whether ``record`` is what ``step`` had made of this claim (its write had landed)."""
    if step.op is RELEASE:
        return True
    status = SUCCEEDED if step.op is COMPLETE else FAILED
    return (
        record is not None
        and record.status is status
        and record.owner == ticket.owner
        and record.fence == ticket.fence
    )


def settle_again(
    store: Any, call: Call, ticket: Ticket, step: Settle, exc: IdempotencyError
) -> IdempotencyError | None:
    """``step``'s write, which failed with ``exc``, made again while the lease holds. None:
    it is made (now, or by the try that failed); else the error that stands."""
    for tries, pause in enumerate(_pauses(call, exc), 1):
        time.sleep(pause)
        try:
            getattr(store, step.op[0])(ticket, *step.args)
        except LeaseLostError as lost:
            try:
                if not _landed(store.get(ticket.scope, ticket.key), ticket, step):
                    return lost
            except IdempotencyError:
                return lost
        except StoreUnavailableError as again:
            exc = again
            continue
        logs.settled_again(call, step.op[0], tries)
        return None
    return exc


async def asettle_again(
    store: Any, call: Call, ticket: Ticket, step: Settle, exc: IdempotencyError
) -> IdempotencyError | None:
    """``settle_again`` on the event loop. Cancelled meanwhile, the write is done to its end
    (``settle_anyway``) before the cancellation is raised, as at the first try."""
    try:
        for tries, pause in enumerate(_pauses(call, exc), 1):
            await asyncio.sleep(pause)
            try:
                await getattr(store, step.op[1])(ticket, *step.args)
            except LeaseLostError as lost:
                try:
                    if not _landed(await store.aget(ticket.scope, ticket.key), ticket, step):
                        return lost
                except IdempotencyError:
                    return lost
            except StoreUnavailableError as again:
                exc = again
                continue
            logs.settled_again(call, step.op[0], tries)
            return None
    except asyncio.CancelledError:
        await settle_anyway(store, call, ticket, step)
        raise
    return exc


def settle_failed(
    store: Any, call: Call, ticket: Ticket, step: Settle, exc: IdempotencyError
) -> None:
    """``step``'s write, which the store failed with ``exc``, made again; the error that stands
    raised unless the call goes on with it (``store_error``)."""
    left = settle_again(store, call, ticket, step, exc)
    if left is not None and not store_error(call, step, left):
        if left is exc:
            raise exc
        raise left from exc


async def asettle_failed(
    store: Any, call: Call, ticket: Ticket, step: Settle, exc: IdempotencyError
) -> None:
    """``settle_failed`` on the event loop."""
    left = await asettle_again(store, call, ticket, step, exc)
    if left is not None and not store_error(call, step, left):
        if left is exc:
            raise exc
        raise left from exc


def settle(store: Any, call: Call, ticket: Ticket, step: Settle) -> None:
    """``step`` done on the store, made again if the store failed it once."""
    try:
        getattr(store, step.op[0])(ticket, *step.args)
    except IdempotencyError as exc:
        settle_failed(store, call, ticket, step, exc)


async def asettle(store: Any, call: Call, ticket: Ticket, step: Settle) -> None:
    """``settle`` on the event loop; cancelled, the write is done to its end before the
    cancellation is raised (``settle_anyway``)."""
    try:
        await getattr(store, step.op[1])(ticket, *step.args)
    except IdempotencyError as exc:
        await asettle_failed(store, call, ticket, step, exc)
    except asyncio.CancelledError:
        await settle_anyway(store, call, ticket, step)
        raise
