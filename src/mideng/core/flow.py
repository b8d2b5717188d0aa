"""One guarded call as an I/O-free state machine: the pipeline's decisions.

The drivers (mideng.guard.pipeline, one sync and one async loop) ask the store for a claim,
hand it to ``Call.next`` and do what it says: run the body, return a replayed value, raise,
or wait and ask again. Once the body is over, ``Call.returned`` or ``Call.raised`` says how
the claim is settled and what the call then returns or raises. Everything that decides lives
here, once, for both drivers; an entry with other rules (a message consumer answers with
verdicts) gives the drivers its own decisions (``mideng.guard.pipeline.Terms``).
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

from mideng.core.failure import rebuild_failure
from mideng.core.policy import OnInProgress, Policy
from mideng.core.record import (
    ACQUIRED,
    FAILED,
    MISMATCH,
    REPLAY,
    UNRESOLVED,
    Claim,
    ClaimRequest,
    Record,
    Ticket,
)
from mideng.core.settle import RELEASED, Complete, Fail, Settle, failure_to_record, unencodable
from mideng.errors import (
    AttemptsExhaustedError,
    CodecError,
    IdempotencyError,
    InProgressError,
    PayloadMismatchError,
    UnresolvedError,
)

# Polling while another holder works: start fast (most bodies are short), back off to a cap.
FIRST_POLL = 0.005
MAX_POLL = 0.25


class Action(enum.Enum):
    """What a driver does next, as ``Call.next`` decides. The details ride on the call itself
    (``ticket``, ``value``, ``error``, ``delay``)."""

    RUN = "run"  # run the body under ``call.ticket``
    RETURN = "return"  # return ``call.value``, the replayed result (of ``call.record``)
    RAISE = "raise"  # raise ``call.error``
    WAIT = "wait"  # sleep ``call.delay`` seconds, then claim again


# Module constants: an enum member read through its class costs a metaclass lookup.
RUN, RETURN, RAISE, WAIT = Action.RUN, Action.RETURN, Action.RAISE, Action.WAIT


def exhausted(scope: str, key: str, record: Record) -> AttemptsExhaustedError:
    last = rebuild_failure(record.error) if record.error is not None else None
    return AttemptsExhaustedError(
        f"{scope}:{key} failed {record.attempts} times (the last: {last!r}); it runs again "
        "only after an operator forgets (releases) or resolves it",
        record,
        last,
    )


@dataclass(slots=True)
class Call(ClaimRequest):
    """One guarded call. It is its own claim request (lease, ttl and expiry policy taken from
    its policy when it is made), so claiming again after a wait copies nothing; and it holds
    what ``next`` decided (see ``Action``). Its fields are given by position, the request's
    first (``ClaimRequest``), then ``policy``, ``started`` and ``type_hint``."""

    policy: Policy = field(default_factory=Policy)
    started: float = 0.0  # the caller's monotonic clock when the call began
    type_hint: Any = None
    polls: int = 0
    duplicate: Claim | None = field(default=None, repr=False)
    # Set by ``next`` for the action it answers and read only after it (not set by __init__:
    # a call is made per guarded call, and most need one of them).
    ticket: Ticket = field(init=False, repr=False, compare=False)  # RUN: the claim to settle
    value: Any = field(init=False, repr=False, compare=False)  # RETURN: the replayed result
    # RETURN: the record replayed; RUN: the record claimed
    record: Record = field(init=False, repr=False, compare=False)
    # RAISE: the error to raise; a consumer's failed handler: its error, for the log lines
    error: BaseException = field(init=False, repr=False, compare=False)
    delay: float = field(init=False, repr=False, compare=False)  # WAIT

    def request(self) -> ClaimRequest:
        return self

    def like(self, key: str, owner: str, request_id: str | None) -> Call:
        """Another call of this one's scope, policy and body (so the same terms) for ``key``,
        as ``Guard.prepare`` would make it without a payload: ``owner`` and ``request_id`` its
        own, started now. A batch makes its calls after the first this way; ``key`` must be
        checked already."""
        return Call(
            self.scope,
            key,
            owner,
            self.lease,
            self.ttl,
            None,
            self.on_expiry,
            request_id,
            self.max_attempts,
            self.policy,
            time.monotonic(),
            self.type_hint,
        )

    def next(self, claim: Claim, now: float | None = None) -> Action:
        """Decide what to do with a claim; ``now`` is the caller's monotonic clock, read here
        when not given (only an in-progress claim needs it: the wait it leaves)."""
        record, outcome = claim.record, claim.outcome
        if outcome is ACQUIRED:
            self.ticket = Ticket(record.scope, record.key, record.owner, record.fence)
            self.record = record
            return RUN
        if self.duplicate is None:
            self.duplicate = claim  # the driver logs the first sighting once
        if outcome is REPLAY:
            if record.status is FAILED and record.error is not None:
                if self.policy.retry_limit:  # a kept failure replays only once attempts ran out
                    return self._raise(exhausted(self.scope, self.key, record))
                return self._raise(rebuild_failure(record.error))
            if record.result is None or record.codec is None:
                return self._raise(
                    IdempotencyError(f"{self.scope}:{self.key} has no stored result")
                )
            codec = self.policy.codec
            if record.codec != codec.name:
                from mideng.core.codec import get_codec

                codec = get_codec(record.codec)
            self.value = codec.decode(record.result, self.type_hint)
            self.record = record
            return RETURN
        if outcome is MISMATCH:
            return self._raise(
                PayloadMismatchError(
                    f"{self.scope}:{self.key} was used before with a different payload; use a new "
                    "key for a new operation",
                    record,
                )
            )
        if outcome is UNRESOLVED:
            return self._raise(
                UnresolvedError(
                    f"{self.scope}:{self.key} is UNKNOWN: an earlier attempt died while doing "
                    "irreversible work. Check with the provider, then Guard.resolve() it",
                    record,
                )
            )
        return self._in_progress(record, time.monotonic() if now is None else now)

    def returned(self, result: Any) -> Settle:
        """The body returned ``result``: complete with it encoded, and return it; or, when the
        codec can't store it, record that as the failure and raise it."""
        policy = self.policy
        codec = policy.codec
        try:
            data = codec.encode(result)
        except CodecError as exc:
            return unencodable(policy, exc, result)
        return Settle(Complete(data, codec.name, policy.ttl), None, result)

    def raised(self, exc: BaseException) -> Settle:
        """The body raised ``exc``: record it (``on_error="record"``) or release the claim;
        raise it either way. A CodecError (a result, a step's or a nested call's, that could
        not be stored) ends a task as an unstorable result of its own does: what ran before it
        is not run again."""
        policy = self.policy
        if policy.retry_limit and isinstance(exc, CodecError):
            return unencodable(policy, exc)
        failure = failure_to_record(policy, exc)
        if failure is None:
            return Settle(RELEASED, exc)
        return Settle(Fail(failure, policy.ttl), exc)

    def _raise(self, error: BaseException) -> Action:
        self.error = error
        return RAISE

    def _in_progress(self, record: Record, now: float) -> Action:
        remaining = self.policy.wait_timeout - (now - self.started)
        if self.policy.in_progress is OnInProgress.WAIT and remaining > 0:
            self.delay = min(FIRST_POLL * (2 ** min(self.polls, 16)), MAX_POLL, remaining)
            self.polls += 1
            return WAIT
        waited = " after waiting" if self.policy.in_progress is OnInProgress.WAIT else ""
        return self._raise(
            InProgressError(
                f"{self.scope}:{self.key} is still being processed by another caller{waited}",
                record,
                retry_after=min(self.policy.lease, 1.0),
            )
        )
