"""After the body: the writes that settle a claim, as typed values, and the decisions the
pipeline's calls make with them (``mideng.core.flow.Call.returned`` / ``raised``); how an
operator's ``resolve`` settles an UNKNOWN record.

A result is encoded and completes the claim. An exception either releases the claim (the retry
may run again: the default, and always for cancellation and interrupts) or records the failure
so duplicates replay it (``on_error="record"``, business exceptions only). A result the codec
can't store means the body ran but can't be replayed: that is recorded as the failure, so
duplicates get the same clear error instead of running the body again.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, NamedTuple

from mideng.core.codec import UNSTORED
from mideng.core.failure import encode_failure
from mideng.core.policy import OnError, Policy
from mideng.core.record import Resolution
from mideng.errors import CodecError, ConfigurationError, IdempotencyError, StoreUnavailableError

if TYPE_CHECKING:
    from mideng.core.record import Record, Ticket
    from mideng.stores.base import RecordStore

_RELEASE = OnError.RELEASE
#: ``resolve(result=UNSET)``: no result given (None is a result).
UNSET: Any = object()


def failure_to_record(policy: Policy, exc: BaseException) -> bytes | None:
    """The failure to store for ``exc``, or None when the claim is to be released."""
    if isinstance(exc, CodecError) or (
        policy.on_error is not _RELEASE and isinstance(exc, Exception)
    ):
        return encode_failure(exc)
    return None


# Each write makes itself on a store, blocking (``on``) or awaited (``aon``): the driver calls
# the one store operation the write is, and mypy checks that call.


class Complete(NamedTuple):
    """Store the result: ``store.complete(ticket, result, codec, ttl)``."""

    result: bytes
    codec: str
    ttl: float | None

    def on(self, store: RecordStore, ticket: Ticket) -> Record:
        return store.complete(ticket, self.result, self.codec, self.ttl)

    async def aon(self, store: RecordStore, ticket: Ticket) -> Record:
        return await store.acomplete(ticket, self.result, self.codec, self.ttl)


class Fail(NamedTuple):
    """Record the failure duplicates replay: ``store.fail(ticket, error, ttl)``."""

    error: bytes
    ttl: float | None

    def on(self, store: RecordStore, ticket: Ticket) -> Record:
        return store.fail(ticket, self.error, self.ttl)

    async def aon(self, store: RecordStore, ticket: Ticket) -> Record:
        return await store.afail(ticket, self.error, self.ttl)


class Release(NamedTuple):
    """Drop the claim so a retry runs again: ``store.release(ticket)``."""

    def on(self, store: RecordStore, ticket: Ticket) -> None:
        store.release(ticket)

    async def aon(self, store: RecordStore, ticket: Ticket) -> None:
        await store.arelease(ticket)


class Hold(NamedTuple):
    """Keep the claim ``lease`` seconds more, its attempt counted, so a copy that comes back
    sooner waits: ``store.heartbeat(ticket, lease, ttl)`` (a consumer's failed run, retried
    after a backoff)."""

    lease: float
    ttl: float | None

    def on(self, store: RecordStore, ticket: Ticket) -> Record:
        return store.heartbeat(ticket, self.lease, self.ttl)

    async def aon(self, store: RecordStore, ticket: Ticket) -> Record:
        return await store.aheartbeat(ticket, self.lease, self.ttl)


#: A write that settles a claim, as a typed value (mideng.guard.settling makes it on a store).
Write = Complete | Fail | Release | Hold
#: The store operation each write is, by name (log lines and metric labels).
OPERATION: dict[type[Write], str] = {
    Complete: "complete",
    Fail: "fail",
    Release: "release",
    Hold: "heartbeat",
}
#: The one Release: it holds nothing.
RELEASED = Release()


class Settle(NamedTuple):
    """What a claim becomes once the body is over: ``write``, the store write that settles it;
    ``error``, what the call raises once it is settled; and ``value``, what it returns when
    ``error`` is None and the body raised (an entry that answers a failure, as a consumer
    answers with a verdict). When the body returned and ``error`` is None, the call returns
    the body's result."""

    write: Write
    error: BaseException | None
    value: Any = None

    @property
    def operation(self) -> str:
        return OPERATION[type(self.write)]


def unencodable(policy: Policy, exc: CodecError, result: Any = None) -> Settle:
    """``returned``'s step when the codec can't store the result: the failure recorded, the
    codec's error raised. On a task scope (failures retried) the claim is completed with the
    error in place of the result (``UnstoredCodec``): a failed attempt would be granted again,
    by every store's claim rule, and the body that ran would run again.

    A ``result`` that is a coroutine or a generator not yet started (a sync body returning
    ``charge()`` unawaited, a generator function, an async body missing an ``await``) means
    the work never ran: recorded, the key would answer CodecError for its whole retention
    and the work would never run. The claim is released and a ConfigurationError raised."""
    if _not_started(result):
        result.close()  # no "never awaited" warning for work that is refused on purpose
        refused = ConfigurationError(
            f"the guarded body returned a {type(result).__name__} that never ran; guard "
            "an async body with arun() or an async def, and await what it returns"
        )
        refused.__cause__ = exc  # raised after the release, outside the codec's except
        return Settle(RELEASED, refused)
    if policy.retry_limit:
        return Settle(Complete(encode_failure(exc), UNSTORED, policy.ttl), exc)
    return Settle(Fail(encode_failure(exc), policy.ttl), exc)


def _not_started(value: Any) -> bool:
    if inspect.iscoroutine(value):
        return inspect.getcoroutinestate(value) == inspect.CORO_CREATED
    if inspect.isgenerator(value):
        return inspect.getgeneratorstate(value) == inspect.GEN_CREATED
    return False


def tolerated(policy: Policy, step: Settle | None, exc: BaseException) -> bool:
    """Whether a store error lets the call go on (the driver logs it) rather than raise it.

    ``step``: the settling the store failed at, None for the claim. Settling after an error
    never hides that error behind the store's: the caller gets the body's own. A claim or a
    completion the store could not make goes on only in ``fail_open``, and only when the store
    is unavailable (a lost lease is an answer, not an outage)."""
    if step is not None and step.error is not None:
        return isinstance(exc, IdempotencyError)
    return policy.fail_open and isinstance(exc, StoreUnavailableError)


def resolution(policy: Policy, result: Any, failed: bool) -> Resolution:
    """How an operator settles an UNKNOWN record: ``result`` (it happened; encoded as the
    scope's codec would) or ``failed`` (it didn't) — exactly one of them."""
    if failed == (result is not UNSET):
        raise ConfigurationError("resolve() needs exactly one of result=... or failed=True")
    if failed:
        return Resolution(None, None, True, policy.ttl)
    codec = policy.codec
    return Resolution(codec.encode(result), codec.name, False, policy.ttl)
