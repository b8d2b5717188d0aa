"""A consumer's terms for the pipeline (mideng.guard.pipeline): a message's claim, its
handler's run and the settling write, answered with verdicts instead of values and errors.

Where the Guard's call replays a duplicate, waits for one in progress or raises, a delivery
answers at once with the verdict the adapter carries out (``verdict.standing``: acked
unrun, sent back while in flight elsewhere, dead-lettered once given up on). A handler error
keeps the claim with its attempt count — held for the backoff (``Hold``), or recorded as the
failure once the attempts are used up — and answers Retry or DeadLetter; a cancellation gives
the claim back and is raised. A run completes with the codec's None (nothing is replayed to a
message). A store that fails the completion leaves the run kept (mideng.messaging.kept_completions)
and the message sent back; one that fails the claim, or a failure's write, is logged and
decided by the consumer, never raised into the adapter's loop.
"""

from __future__ import annotations

import time
from typing import Any

from mideng.core import effects
from mideng.core.effects import Effects
from mideng.core.failure import encode_failure
from mideng.core.flow import RETURN, Action, Call
from mideng.core.policy import Policy
from mideng.core.record import Claim, Ticket
from mideng.core.settle import RELEASED, Complete, Fail, Hold, Release, Settle
from mideng.errors import IdempotencyError, LeaseLostError
from mideng.guard.pipeline import Terms
from mideng.guard.settling import written
from mideng.messaging.kept_completions import KeepingConsumer, kept
from mideng.messaging.verdict import Ack, DeadLetter, Retry, after_failure, standing
from mideng.observability import logs
from mideng.stores.base import RecordStore
from mideng.stores.batch import Completion

# Verdicts are frozen values: handed out as they are, not made per message.
RAN, UNRUN = Ack(ran=True), Ack(ran=False)


class Delivery:
    """One consumer's decisions at each point of the pipeline; ``terms`` hands them to it."""

    def __init__(self, consumer: KeepingConsumer) -> None:
        self.consumer = consumer
        # What a completion stores (the codec's None), encoded once per codec.
        self.nothing: tuple[Any, bytes] = (None, b"")
        self.terms = Terms(
            next=self.next,
            returned=self.returned,
            raised=self.raised,
            claim_failed=_never,
            unsettled=self.unsettled,
            cut_short=self.cut_short,
        )

    def encoded_none(self, policy: Policy) -> tuple[str, bytes]:
        """The completion's result, (codec name, bytes), made before any handler runs: made
        after it, a codec that can't store None would leave the claim to lapse and the copy
        that comes back to run the handler again. Raises CodecError."""
        codec, data = self.nothing
        if codec is not policy.codec:
            data = policy.codec.encode(None)
            codec = policy.codec
            self.nothing = codec, data
        return codec.name, data

    def next(self, call: Call, claim: Claim) -> Action:
        """A claim acquired runs the handler; any other is answered at once with its verdict."""
        if claim.acquired:
            return Call.next(call, claim)
        call.duplicate = claim
        call.value = standing(claim, time.time(), self.consumer.rules)
        return RETURN

    def returned(self, call: Call, cancelled: Any) -> Settle:
        """The handler ran (``mideng.messaging.handlers.run_handler``'s answer: None, or the
        cancellation that arrived while a ``def`` ran on in its thread, raised once the run is
        completed): complete with the codec's None, and ack."""
        codec, data = self.encoded_none(call.policy)
        return Settle(Complete(data, codec, call.policy.ttl), cancelled, RAN)

    def raised(self, call: Call, exc: BaseException) -> Settle:
        """The handler raised: an error keeps the claim with its attempt count (held for the
        backoff, or the failure recorded once the attempts are used up); a cancellation or an
        interrupt gives the claim back, so the next delivery may run it at once."""
        if not isinstance(exc, Exception):
            return Settle(RELEASED, exc)
        attempt = call.record.attempts
        logs.consumer_attempt_failed(call.scope, call.key, attempt, exc)
        call.error = exc
        verdict = after_failure(f"{call.scope}:{call.key}", attempt, exc, self.consumer.rules)
        ttl = call.policy.ttl
        if isinstance(verdict, DeadLetter):
            return Settle(Fail(encode_failure(exc), ttl), None, verdict)
        assert isinstance(verdict, Retry)
        return Settle(Hold(verdict.delay, ttl), None, verdict)

    def unsettled(
        self, store: RecordStore, call: Call, ticket: Ticket, step: Settle, exc: Exception
    ) -> Effects[Any]:
        """The store failed the settling write: see ``settled_anyway``."""
        return effects.answer(self.settled_anyway(call, ticket, step, exc))

    def cut_short(
        self, store: RecordStore, call: Call, ticket: Ticket, step: Settle
    ) -> Effects[None]:
        """A cancellation cut the settling write short: made to its end (a completion: the
        redelivery is then acked unrun; a release: it runs at once), then the cancellation is
        raised."""
        try:
            yield effects.shielded(written(store, ticket, step.write))
        except LeaseLostError:
            pass  # landed before it was cut short, or taken over: nothing left to do
        except Exception as exc:
            self.settled_anyway(call, ticket, step, exc)

    def settled_anyway(self, call: Call, ticket: Ticket, step: Settle, exc: Exception) -> Any:
        """What a message's answer is when the store failed its settling write with ``exc``.

        A completion: the run happened, so it must not run again. A lost lease means it was
        taken over (the taker may run it again, the hazard every lease has): acked. Any other
        failure keeps the completion, written when the message comes back. A failure's write
        or a release: the lease runs out on its own; logged."""
        write = step.write
        if isinstance(write, Complete):
            if isinstance(exc, LeaseLostError):
                lapsed(call, exc)
                return step.value
            completion = Completion(ticket, write.result, write.codec, write.ttl)
            return kept(self.consumer, call.key, completion, exc)
        if isinstance(write, Release):
            logs.consumer_release_failed(ticket.scope, ticket.key, exc)
            return step.value
        if not isinstance(exc, IdempotencyError):
            raise exc
        logs.unsettled(call, call.error, exc)
        return step.value


def _never(call: Call, exc: IdempotencyError) -> bool:
    return False  # a store that fails the claim sends the message back: never run unguarded


def lapsed(call: Call, exc: LeaseLostError) -> None:
    # Ran, but the lease lapsed and someone took the key over: the work is done, so the message
    # is acked; the taker may run it again, the hazard every lease has.
    logs.consumer_claim_lost(call.scope, call.key, exc)
