"""One guarded call, carried out: claim → body → settle, written once and driven twice.

``drive`` (blocking) and ``adrive`` (awaited) are the same short loop. They claim, ask what to
do with the answer (run the body, return a replayed value, raise, or wait and claim again),
run the body with its lease renewed, ask how the claim is settled, and make that write. What
to do is decided without I/O (``Terms``: by default the call's own decisions,
mideng.core.flow.Call); where the store fails (at the claim, at the settling write) or the
call is cancelled, the terms name the procedure that follows (mideng.guard.settling).

The entries that hand it a body drive it: ``Guard.run`` / ``arun`` and the decorator, the
HTTP exchange, multi-step operations, and the message consumer, whose terms answer
duplicates and failures with verdicts (mideng.messaging.delivery). Transactional mode, whose
body is the caller's own ``with`` block, asks the same decisions around its own statements
(mideng.guard.transaction).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mideng.core import effects
from mideng.core.effects import Effects
from mideng.core.flow import RAISE, RETURN, RUN, Action, Call
from mideng.core.record import Claim, Ticket
from mideng.core.settle import Settle
from mideng.errors import IdempotencyError
from mideng.guard.cancellation import give_back
from mideng.guard.heartbeat.tasks import renew_store
from mideng.guard.heartbeat.threads import Heartbeats
from mideng.guard.settling import standing, to_its_end
from mideng.guard.store_errors import at_claim
from mideng.observability import logs
from mideng.stores.base import RecordStore, Store

R = TypeVar("R")
#: A body's positional and keyword arguments, as the entries hand them to the pipeline.
Args = tuple[Any, ...]
Kwargs = dict[str, Any]
#: A body, as ``Guard.prepare`` learns it (its return type, whether it is a coroutine).
Body = Callable[..., Any]
#: An async body: what ``adrive`` awaits.
AsyncBody = Callable[..., Awaitable[R]]


@dataclass(frozen=True, slots=True)
class Terms:
    """What a guarded call does at each point the pipeline leaves open, as plain attributes.

    ``next(call, claim)``: what to do with a claim. ``returned(call, result)`` /
    ``raised(call, exc)``: how the claim is settled once the body is over, and what the call
    then returns or raises. ``claim_failed(call, exc)``: the store failed the claim; True
    when the body runs unguarded. ``unsettled(store, call, ticket, step, exc)``: the procedure
    after the store failed the settling write (its answer is what the call returns, unless it
    raises). ``cut_short(store, call, ticket, step)``: the procedure after a cancellation cut
    the settling write short (the cancellation is raised once it ends).

    The defaults are the Guard's: replay or refuse duplicates, wait for one in progress,
    record or release a failure, make a failed write again while the lease holds."""

    next: Callable[[Call, Claim], Action] = Call.next
    returned: Callable[[Call, Any], Settle] = Call.returned
    raised: Callable[[Call, BaseException], Settle] = Call.raised
    claim_failed: Callable[[Call, IdempotencyError], bool] = at_claim
    unsettled: Callable[[RecordStore, Call, Ticket, Settle, Exception], Effects[Any]] = standing
    cut_short: Callable[[RecordStore, Call, Ticket, Settle], Effects[None]] = to_its_end


#: The Guard's terms.
TERMS = Terms()


def _no_heartbeat() -> None:
    pass


def drive(
    store: Store,
    beats: Heartbeats,
    call: Call,
    fn: Callable[..., R],
    args: Args,
    kwargs: Kwargs,
    terms: Terms = TERMS,
) -> R:
    """Carry ``call`` out with blocking calls; ``beats`` renew its lease while ``fn`` runs."""
    while True:
        try:
            claim = store.claim(call)
        except IdempotencyError as exc:
            if not terms.claim_failed(call, exc):
                raise
            return fn(*args, **kwargs)
        action = terms.next(call, claim)
        if action is RUN:
            break
        logs.duplicate(call)
        if action is RETURN:
            return call.value  # type: ignore[no-any-return]
        if action is RAISE:
            raise call.error
        time.sleep(call.delay)
    p, ticket = call.policy, call.ticket
    stop = (
        beats.start(p.lease, lambda: store.heartbeat(ticket, p.lease, p.ttl), ticket)
        if p.heartbeat
        else _no_heartbeat
    )
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        stop()
        step = terms.raised(call, exc)
        value = settle(store, call, ticket, step, terms)
        if step.error is None:
            return value  # type: ignore[no-any-return]
        raise
    stop()
    step = terms.returned(call, result)
    value = settle(store, call, ticket, step, terms)
    if step.error is not None:
        raise step.error
    return value  # type: ignore[no-any-return]


async def adrive(
    store: Store, call: Call, fn: AsyncBody[R], args: Args, kwargs: Kwargs, terms: Terms = TERMS
) -> R:
    """``drive`` on the running event loop. A claim cut short by a cancellation is given back
    (mideng.guard.cancellation); a settling write cut short is done to its end (``cut_short``)."""
    while True:
        try:
            claim = await store.aclaim(call)
        except IdempotencyError as exc:
            if not terms.claim_failed(call, exc):
                raise
            return await fn(*args, **kwargs)
        except asyncio.CancelledError:  # it may have landed: not left held
            await give_back(store, call)
            raise
        action = terms.next(call, claim)
        if action is RUN:
            break
        logs.duplicate(call)
        if action is RETURN:
            return call.value  # type: ignore[no-any-return]
        if action is RAISE:
            raise call.error
        await asyncio.sleep(call.delay)
    p, ticket = call.policy, call.ticket
    stop = renew_store(p.lease, store, ticket, p.ttl) if p.heartbeat else _no_heartbeat
    try:
        result = await fn(*args, **kwargs)
    except BaseException as exc:
        stop()
        step = terms.raised(call, exc)
        value = await asettle(store, call, ticket, step, terms)
        if step.error is None:
            return value  # type: ignore[no-any-return]
        raise
    stop()
    step = terms.returned(call, result)
    value = await asettle(store, call, ticket, step, terms)
    if step.error is not None:
        raise step.error
    return value  # type: ignore[no-any-return]


def settle(store: RecordStore, call: Call, ticket: Ticket, step: Settle, terms: Terms) -> Any:
    """``step``'s write made on the store (blocking); what the call returns (``step.value``,
    or, when the store failed the write, what ``terms.unsettled`` makes of it)."""
    try:
        step.write.on(store, ticket)
    except Exception as exc:
        return effects.run(terms.unsettled(store, call, ticket, step, exc))
    return step.value


async def asettle(
    store: RecordStore, call: Call, ticket: Ticket, step: Settle, terms: Terms
) -> Any:
    """``settle`` on the event loop; cut short by a cancellation, ``terms.cut_short`` runs to
    its end before the cancellation is raised."""
    try:
        await step.write.aon(store, ticket)
    except Exception as exc:
        return await effects.arun(terms.unsettled(store, call, ticket, step, exc))
    except asyncio.CancelledError:
        await effects.arun(terms.cut_short(store, call, ticket, step))
        raise
    return step.value
