"""Completions the store could not take: kept by key, written before that key runs again.

A handler ran, then the store failed before its completion was written, so the record still
says processing. Sending the message back alone would run the handler a second time once the
store is back: at once if it came back empty (a Redis without persistence), or when the
unrenewed lease lapses. So the consumer keeps the unwritten completion under the message's
key; the redelivered copy writes it and is acked without running. While the store is still
down, the copy goes back again and the completion stays kept.

What is kept lives in the consumer process: a copy redelivered to another process after the
lease lapsed may still run there, the hazard every lease has (the transactional mode has none:
its record commits with the handler's writes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from mideng.core.flow import Call
from mideng.core.record import Ticket
from mideng.errors import LeaseLostError
from mideng.guard.cancellation import through
from mideng.guard.driver import Driver
from mideng.messaging.batch_claims import complete_all
from mideng.messaging.verdict import Ack, Retry, RetryRules, Verdict
from mideng.observability import logs
from mideng.observability.store_metrics import counted
from mideng.stores.batch import Completion


class KeepingConsumer(Protocol):
    """The consumer whose completions are kept, as this module reads it
    (mideng.messaging.consumer.IdempotentConsumer)."""

    guard: Driver
    scope: str
    rules: RetryRules
    unwritten: Unwritten

    def prepare(self, key: str) -> Call: ...


# Kept completions per consumer. A key is held until its message comes back, which a broker
# does unless the message is dead-lettered or removed meanwhile; the bound keeps such leftovers
# from growing without end through a long outage. Past it the oldest is dropped, and that key
# is back to what a lease alone gives: its copy runs again once the lease lapses.
HELD_LIMIT = 65536


class Unwritten:
    """The kept completions of one consumer, by business key, oldest first."""

    def __init__(self, scope: str, limit: int = HELD_LIMIT) -> None:
        self._held: dict[str, Completion] = {}
        self.scope = scope
        self.limit = limit
        self.dropped = 0

    def __contains__(self, key: str) -> bool:
        return key in self._held

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, key: str, completion: Completion) -> None:
        self._held.pop(key, None)  # held again: now the newest
        self._held[key] = completion
        while len(self._held) > self.limit:
            oldest = next(iter(self._held))
            del self._held[oldest]
            self.dropped += 1
            logs.consumer_completion_dropped(self.scope, oldest, self.limit)

    def take(self, key: str) -> Completion:
        return self._held.pop(key)


def kept(consumer: KeepingConsumer, key: str, completion: Completion, exc: Exception) -> Verdict:
    """The handler ran, the store refused its completion: keep it, send the message back."""
    consumer.unwritten.hold(key, completion)
    logs.consumer_uncompleted(consumer.scope, key, exc)
    return Retry(
        consumer.rules.retry_delay, f"ran; the completion is kept until the store is back: {exc}"
    )


async def write_kept(consumer: KeepingConsumer, keys: Sequence[str]) -> list[Verdict]:
    """Write the kept completions of ``keys`` (one round trip where the store batches) and
    answer each redelivered copy: acked unrun once written, sent back while the store is down."""
    items = [(key, consumer.unwritten.take(key)) for key in keys]
    try:
        answers = await complete_all(counted(consumer.guard.store), [c for _, c in items])
    except Exception as exc:  # down still, or failing otherwise: kept for the next copy
        return [kept(consumer, key, c, exc) for key, c in items]
    out: list[Verdict] = []
    for (key, completion), answer in zip(items, answers, strict=True):
        if isinstance(answer, LeaseLostError):
            out.append(await _record_anew(consumer, key, completion, answer))
        else:
            logs.consumer_completion_written(consumer.scope, key)
            out.append(Ack(ran=False))
    return out


async def _record_anew(
    consumer: KeepingConsumer, key: str, completion: Completion, lost: LeaseLostError
) -> Verdict:
    # The record lapsed and was taken, or is gone (a store that came back empty). The run
    # happened, so it is recorded through a fresh claim, without running the handler again.
    store: Any = counted(consumer.guard.store)
    try:
        claim = await store.aclaim(consumer.prepare(key).request())
    except Exception as exc:  # down again: kept for the next copy
        return kept(consumer, key, completion, exc)
    if not claim.acquired:
        # Finished by another run, or held by one that took the lapsed lease over.
        logs.consumer_claim_lost(consumer.scope, key, lost)
        return Ack(ran=False)
    fresh = Completion(Ticket.of(claim.record), completion.result, completion.codec, completion.ttl)
    try:
        await store.acomplete(fresh.ticket, fresh.result, fresh.codec, fresh.ttl)
    except LeaseLostError as exc:
        logs.consumer_claim_lost(consumer.scope, key, exc)
        return Ack(ran=False)
    except Exception as exc:  # down again: the fresh claim's completion is the one kept
        return kept(consumer, key, fresh, exc)
    logs.consumer_completion_written(consumer.scope, key)
    return Ack(ran=False)


async def finish(consumer: KeepingConsumer, ran: Sequence[tuple[str, Completion]]) -> None:
    """Handlers ran (by key, their completions) and the task deciding them is cancelled: the
    completions are written to their end before it raises that cancellation. Left
    processing, each record would be taken over once its lease ran out and its redelivered
    message run again; written, the redelivery is acked unrun. What the store refuses is kept,
    as after any failed completion."""
    if not ran:
        return
    store = counted(consumer.guard.store)
    try:
        await through(lambda: complete_all(store, [c for _, c in ran]))
    except Exception as exc:  # LeaseLostError comes back as an answer: landed, or taken over
        for key, completion in ran:
            kept(consumer, key, completion, exc)


async def release_quietly(store: Any, ticket: Ticket) -> None:
    """Give back the claim of a run that was cancelled or interrupted, to its end however
    often the task is cancelled meanwhile; a store error is logged (the lease runs out)."""
    try:
        await through(lambda: store.arelease(ticket))
    except Exception as exc:
        logs.consumer_release_failed(ticket.scope, ticket.key, exc)
