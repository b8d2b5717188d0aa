"""After the body: the write that settles a claim, made again when the store failed it once,
and done to its end when the call is cancelled at it. Written once (a procedure of effects,
mideng.core.effects), entered once the store failed the write or the call was cancelled at
it; the drivers (mideng.guard.pipeline) make the write and enter these when it fails.

Made again: the body has run. Left processing, its record is taken over once the lease runs
out and the body runs a second time, though its holder never died; a failure meant to be
recorded (so it is not run again) would be run again too. So a write the store failed with
``StoreUnavailableError`` (a connection reset, a failover's first moments, a statement
timeout) is made again, after a short pause that doubles, for up to ``WINDOW`` seconds and
never past a third of the lease (the beat renews a live lease every third, so at least that
much of it was left). Every try is fenced by the claim's (owner, fence), as the first was. A
store down for longer leaves the error standing, as before: the caller gets it, unless the
call goes on with it (``store_error``). A write that had landed, its answer lost on the way
back, meets ``LeaseLostError`` when made again: the record is read, and if it is settled
under this very claim the write is taken as made. A release meeting it has nothing left to
do either way (the key is free, or someone else holds it after the lease). Under
``fail_open`` nothing is tried again: that policy goes on at once, unguarded, as it does at
the claim.

Cancelled (async only): a cancellation (a client gone, an ``asyncio.timeout`` run out, a
consumer stopping) arriving at the settling write, or at a pause between its tries, cuts a
write whose body already ran. Left processing, the record would be taken over after its
lease and the body run again; released, a retry would run it at once. So the write is done
again, to its end, and only then is the cancellation raised. Done again, a write that had
landed changes nothing: it is fenced, and meets LeaseLostError.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

from mideng.core import effects
from mideng.core.effects import Effect, Effects
from mideng.core.flow import Call
from mideng.core.record import FAILED, SUCCEEDED, Record, Ticket
from mideng.core.settle import Complete, Hold, Release, Settle, Write
from mideng.errors import IdempotencyError, LeaseLostError, StoreUnavailableError
from mideng.guard.store_errors import store_error
from mideng.observability import logs
from mideng.stores.base import RecordStore

#: The first pause before a write is made again (seconds); each next one doubles.
FIRST_PAUSE = 0.05
#: The longest a write is tried again (seconds): a dropped connection's write goes through on
#: the next one at once, and a caller is not held long past its body by a store that is down.
WINDOW = 1.0


def written(store: RecordStore, ticket: Ticket, write: Write) -> Effect[Any]:
    """``write`` as an effect of the procedures below."""
    return effects.call(write.on, write.aon, store, ticket)


def standing(
    store: RecordStore, call: Call, ticket: Ticket, step: Settle, exc: Exception
) -> Effects[Any]:
    """After the store failed ``step``'s write with ``exc``: the write made again while the
    lease holds; the store error that then stands raised, unless the call goes on with it
    (then what the call returns: ``step.value``). An error that is not the store's answer
    (a bug in a store's code) is raised as it is."""
    if not isinstance(exc, IdempotencyError):
        raise exc
    left = yield from made_again(store, call, ticket, step, exc)
    if left is not None and not store_error(call, step, left):
        if left is exc:
            raise exc
        raise left from exc
    return step.value


def made_again(
    store: RecordStore, call: Call, ticket: Ticket, step: Settle, exc: IdempotencyError
) -> Effects[IdempotencyError | None]:
    """``step``'s write, which failed with ``exc``, made again while the lease holds. None:
    it is made (now, or by the try that failed); else the error that stands. Cancelled at a
    pause or a try, the write is done to its end before the cancellation is raised."""
    write = written(store, ticket, step.write)
    try:
        for tries, pause in enumerate(_pauses(call, exc), 1):
            yield effects.pause(pause)
            try:
                yield write
            except LeaseLostError as lost:
                try:
                    record = yield effects.call(store.get, store.aget, ticket.scope, ticket.key)
                except IdempotencyError:
                    return lost
                if not _landed(record, ticket, step.write):
                    return lost
            except StoreUnavailableError as again:
                exc = again
                continue
            logs.settled_again(call, step.operation, tries)
            return None
    except asyncio.CancelledError:
        yield from to_its_end(store, call, ticket, step)
        raise
    return exc


def to_its_end(store: RecordStore, call: Call, ticket: Ticket, step: Settle) -> Effects[None]:
    """``step``'s write done again, uncancellable: a cancellation cut it short, and the caller
    raises that once this returns."""
    try:
        yield effects.shielded(written(store, ticket, step.write))
    except LeaseLostError:
        pass  # the cut-short write had landed (or the key was taken over): nothing to do
    except IdempotencyError as exc:
        logs.unsettled(call, asyncio.CancelledError(), exc)


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


def _landed(record: Record | None, ticket: Ticket, write: Write) -> bool:
    """Whether ``record`` is what ``write`` had made of this claim (its write had landed)."""
    if isinstance(write, (Release, Hold)):
        return True
    status = SUCCEEDED if isinstance(write, Complete) else FAILED
    return (
        record is not None
        and record.status is status
        and record.owner == ticket.owner
        and record.fence == ticket.fence
    )
