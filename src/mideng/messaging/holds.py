"""A batch's claims, kept while its handlers run one after another.

A consumer claims a whole fetched batch in one round trip, so every lease of the batch starts
then, while the handlers run in turn: the last key of a batch of slow handlers would wait past
its lease, be taken over (by a copy of the message elsewhere, or a stream's pending-entry
claim) and then run here too. So each key is renewed from its claim until its completion is
written, and a key whose lease is no longer known to hold when its turn comes is not started.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mideng.core.flow import Call
from mideng.core.record import Claim, Ticket
from mideng.guard.aheartbeat import AsyncBeat, hold_async

# A batch's handler starts only while at least this share of its lease is known to remain: with
# renewals working that is always so (each renews at a third), so only failed renewals stop it.
START_SHARE = 1 / 3
# A batch's claim: its ticket, the beat renewing it (None when the scope has no heartbeat), and
# the lease's end as known at the claim.
Held = tuple[Ticket, AsyncBeat | None, float]


def keep(store: Any, call: Call, claim: Claim, sent: float) -> Held:
    ticket, p = Ticket.of(claim.record), call.policy
    if not p.heartbeat:  # not renewed: the lease holds until its end from the claim's time
        return ticket, None, sent + p.lease
    renew = hold_async(p.lease, lambda: store.aheartbeat(ticket, p.lease, p.ttl), ticket, sent)
    return ticket, renew, sent + p.lease


def still_held(held: Held, lease: float) -> bool:
    _, beat, end = held
    if beat is not None:
        return beat.holds_for(START_SHARE)
    return end - asyncio.get_running_loop().time() >= lease * START_SHARE


def stop_beat(held: Held) -> None:
    if held[1] is not None:
        held[1].stop()
