"""IdempotentConsumer: one run per business key, however often the broker delivers it.

    consumer = IdempotentConsumer(guard, "stock", deduct, key=lambda m: m.headers["order"])
    verdict = await consumer.handle(message)        # Ack / Retry / DeadLetter, for the adapter

Per message: read the key (the ``message-id`` header, else the ``idempotency-key`` header,
unless ``key=`` says otherwise: mideng.messaging.keys.default_key) and
the request id, claim the key, run the handler, complete the claim, and only then tell the
adapter to ack. A copy whose first run finished is acked without running; one whose key is held
elsewhere goes back to the broker with a delay; a handler error keeps the claim with its
attempt count and goes back with backoff, and is dead-lettered after ``max_attempts`` runs; a
message without a usable key is dead-lettered with the reason, never run unguarded. A store
that is down never ends the adapter's loop: what it leaves undecided goes back with a delay,
and a run whose completion it refused is kept and written when the message comes back
(mideng.messaging.kept_completions).

With ``engine=`` (a SQLAlchemy Engine or AsyncEngine, or a Django database alias) the handler
gets ``(message, conn)`` and its writes commit in the same transaction as the dedup record
(mideng.messaging.transactional).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, cast

from mideng.context import get_request_id, request_id_scope
from mideng.core.callables import is_async
from mideng.core.event_loop import running_loop
from mideng.core.failure import message_of
from mideng.core.flow import RUN, Call
from mideng.core.keys import check_scope
from mideng.core.settle import Complete
from mideng.errors import (
    InvalidKeyError,
    LeaseLostError,
    StoreUnavailableError,
)
from mideng.guard.driver import Driver
from mideng.guard.owner_ids import OWNERS
from mideng.guard.pipeline import asettle
from mideng.messaging.batch_claims import BatchHold, claim_all, complete_all
from mideng.messaging.delivery import RAN, UNRUN, Delivery, lapsed
from mideng.messaging.handlers import handlers_done, run_handler
from mideng.messaging.kept_completions import (
    Unwritten,
    finish,
    kept,
    release_quietly,
    write_kept,
)
from mideng.messaging.keys import KeyFn, default_key, key_as, key_of, request_id_of, scope_of
from mideng.messaging.message import Message
from mideng.messaging.transactional import check as check_transactional
from mideng.messaging.transactional import django_alias
from mideng.messaging.transactional import handle as handle_in_transaction
from mideng.messaging.verdict import Ack, DeadLetter, Retry, RetryRules, Verdict, metric_label
from mideng.observability import logs, observers
from mideng.observability.store_metrics import counted
from mideng.stores.batch import Completion

DeadLetterHook = Callable[[Message, str], "Awaitable[None] | None"]


class Consumer(Protocol):
    """What every broker adapter asks of the consumer it feeds: the verdict for one message,
    and the verdicts for a fetched batch, in its order. ``IdempotentConsumer`` is one."""

    async def handle(self, message: Message) -> Verdict: ...

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]: ...


#: How long messages a consumer gave no verdict for (it raised: the store is down) wait to
#: come back.
UNDECIDED_DELAY = 1.0


async def decide(consumer: Consumer, messages: Sequence[Message]) -> list[Verdict]:
    """What an adapter asks of its consumer for what it fetched: one message goes to
    ``handle``, more to ``handle_batch``."""
    if len(messages) == 1:
        return [await consumer.handle(messages[0])]
    return await consumer.handle_batch(messages)


def undecided(messages: Sequence[Message]) -> list[Verdict]:
    """The verdicts for messages the consumer raised on: every one comes back after
    ``UNDECIDED_DELAY``, none is lost."""
    return [Retry(UNDECIDED_DELAY, "the consumer raised")] * len(messages)


class IdempotentConsumer:
    """Runs ``handler(message)`` once per business key; adapters carry out its verdicts.

    ``guard``: anything with the Driver protocol (a Guard). ``scope``: the consumer's scope.
    ``key``: ``message -> str`` (None: the ``message-id`` header, else ``idempotency-key``;
    ``default_key``). ``engine``: run ``handler(message, conn)`` in the dedup record's
    transaction (a SQLAlchemy Engine or AsyncEngine, or a Django database alias: then ``conn``
    is Django's connection). ``max_attempts``, ``retry_delay``, ``max_retry_delay``,
    ``in_flight_delay``: see RetryRules.
    ``on_dead_letter(message, reason)``, def or async def: called for each message
    dead-lettered, before the adapter settles it; if it raises, the message is retried instead
    of being lost. Other options override the scope's policy (lease, ttl, heartbeat, ...).
    """

    def __init__(
        self,
        guard: Driver,
        scope: str,
        handler: Callable[..., Any],
        *,
        key: KeyFn | None = None,
        engine: Any = None,
        max_attempts: int = 5,
        retry_delay: float = 1.0,
        max_retry_delay: float = 60.0,
        in_flight_delay: float = 1.0,
        on_dead_letter: DeadLetterHook | None = None,
        **options: Any,
    ) -> None:
        self.guard = guard
        self.scope = check_scope(scope)
        self.handler = handler
        self.key: KeyFn = key if key is not None else default_key
        self.engine = engine
        self.rules = RetryRules(max_attempts, retry_delay, max_retry_delay, in_flight_delay)
        self.options = options
        self.policy = guard.policy(self.scope, **options)
        self.on_dead_letter = on_dead_letter
        self.coroutine = is_async(handler)
        self.async_engine = engine is not None and hasattr(engine, "sync_engine")
        self.django_alias = django_alias(engine)
        self.delivery = Delivery(self)  # its decisions at each point of the pipeline
        # Runs whose completion the store refused, written when their message comes back.
        self.unwritten = Unwritten(scope)
        if engine is not None:
            check_transactional(self)

    # -- the adapters' surface ----------------------------------------------------------------
    async def handle(self, message: Message) -> Verdict:
        """Decide one message: run it at most once, and say what the adapter must do."""
        with request_id_scope(request_id_of(message)):
            try:
                key = key_of(message, self.key)
            except InvalidKeyError as exc:
                verdict: Verdict = DeadLetter(str(exc))
            else:
                try:
                    if self.engine is not None:
                        verdict = await handle_in_transaction(self, message, key)
                    else:
                        verdict = await self._handle(message, key)
                except Exception as exc:
                    verdict = self._undecided(1, exc)
            return await self._settled(message, verdict)

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        """Decide a fetched batch: one claim round trip, handlers in order, one completion
        round trip. Copies of one key in the batch get the first copy's verdict (acked
        without running when it ran)."""
        if self.engine is not None:
            return [await self.handle(m) for m in messages]
        try:
            verdicts = await self._decide_batch(messages)
        except Exception as exc:
            verdicts = [self._undecided(len(messages), exc)] * len(messages)
        done: list[Verdict] = []
        for message, verdict in zip(messages, verdicts, strict=True):
            final = verdict
            if isinstance(verdict, DeadLetter):
                with scope_of(request_id_of(message)):
                    final = await self._dead_lettered(message, verdict)
            if observers.metrics is not None:
                self._count(final)
            done.append(final)
        return done

    def _undecided(self, count: int, exc: Exception) -> Verdict:
        # Not a handler error (those have their rules) but a store or driver failure no rule
        # named: the message comes back later, and consume goes on.
        logs.consumer_undecided(self.scope, count, exc)
        return Retry(self.rules.retry_delay, f"undecided: {type(exc).__name__}: {message_of(exc)}")

    async def _decide_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        verdicts: list[Verdict | None] = [None] * len(messages)
        rids = [request_id_of(m) for m in messages]  # read once, entered where needed
        first: dict[str, int] = {}
        copies: dict[int, int] = {}
        calls: list[tuple[int, Call]] = []
        held: list[tuple[int, str]] = []
        for i, message in enumerate(messages):
            try:
                key = key_as(message, self.key, rids[i])
            except InvalidKeyError as exc:
                verdicts[i] = DeadLetter(str(exc))
                continue
            if key in first:
                copies[i] = first[key]
                continue
            first[key] = i
            if key in self.unwritten:
                held.append((i, key))
            elif calls:
                calls.append((i, calls[0][1].like(key, next(OWNERS.ids), rids[i])))
            else:
                with scope_of(rids[i]):
                    calls.append((i, self.prepare(key)))
        if held:
            answers = await write_kept(self, [key for _, key in held])
            for (i, _), answer in zip(held, answers, strict=True):
                verdicts[i] = answer
        await self._run_batch(messages, rids, calls, verdicts)
        for i, of in copies.items():
            v = verdicts[of]
            verdicts[i] = UNRUN if isinstance(v, Ack) else v
        decided: list[Verdict] = []
        for verdict in verdicts:
            assert verdict is not None
            decided.append(verdict)
        return decided

    # -- one message, one batch ---------------------------------------------------------------
    def prepare(self, key: str) -> Call:
        """The Guard's call for one message's ``key`` under this consumer's scope and policy."""
        return self.guard.prepare(self.scope, key, self.handler, None, self.policy)

    async def _handle(self, message: Message, key: str) -> Verdict:
        if key in self.unwritten:
            return (await write_kept(self, [key]))[0]
        call = self.prepare(key)
        self.delivery.encoded_none(call.policy)
        try:
            # The delivery's terms answer with a verdict, whatever the handler returns.
            verdict = cast(
                Verdict,
                await self.guard.adrive(
                    call,
                    run_handler,
                    (self.handler, self.coroutine, message),
                    {},
                    self.delivery.terms,
                ),
            )
        except StoreUnavailableError as exc:
            return Retry(self.rules.retry_delay, f"store unavailable at claim: {exc}")
        return verdict

    async def _run_batch(
        self,
        messages: Sequence[Message],
        rids: list[str | None],
        calls: list[tuple[int, Call]],
        out: list[Any],
    ) -> None:
        if not calls:
            return
        self.delivery.encoded_none(calls[0][1].policy)  # CodecError: before any claim
        store = counted(self.guard.store)
        sent = running_loop().time()
        try:
            claims = await claim_all(store, [call.request() for _, call in calls])
        except StoreUnavailableError as exc:
            for i, _ in calls:
                out[i] = Retry(self.rules.retry_delay, f"store unavailable at claim: {exc}")
            return
        # Every lease of the batch was granted at once, but its handlers run one after another:
        # each is renewed from now until its completion is written, so a key waiting behind a
        # slow handler is not taken over (by a copy elsewhere, or a stream's pending-entry
        # claim) and then run here too. A key whose lease is no longer known to hold when its
        # turn comes is not started (see _run). One beat renews the batch (messaging.batch_claims).
        p = calls[0][1].policy
        # Each claim decided now (a duplicate's verdict, a run's ticket); run in turn below.
        terms = self.delivery.terms
        runs = [terms.next(c, claim) is RUN for (_, c), claim in zip(calls, claims, strict=True)]
        tickets = [c.ticket if run else None for (_, c), run in zip(calls, runs, strict=True)]
        held = BatchHold(store, tickets, p.lease, p.ttl, p.heartbeat, sent)
        ran: list[tuple[int, Call, Completion]] = []
        started: set[int] = set()
        try:
            for n, ((i, call), run) in enumerate(zip(calls, runs, strict=True)):
                started.add(n)
                rid = rids[i]
                if rid == get_request_id():  # most messages carry none, and none is current
                    out[i], completion = await self._run(messages[i], call, run, held, n)
                else:
                    with request_id_scope(rid):
                        out[i], completion = await self._run(messages[i], call, run, held, n)
                if completion is not None:
                    ran.append((i, call, completion))
            handlers_done()
            try:
                answers = await complete_all(store, [c for _, _, c in ran])
            except Exception as exc:  # as in _handle: what ran is kept, never run again
                for i, call, completion in ran:
                    out[i] = kept(self, call.key, completion, exc)
                return
            for (_, call, _), answer in zip(ran, answers, strict=True):
                if isinstance(answer, LeaseLostError):
                    lapsed(call, answer)
        except BaseException:
            # Cancelled mid-batch: what ran is completed (redelivered, it is acked unrun), and
            # the keys not started yet are given back, so their redeliveries run at once
            # instead of waiting out the lease.
            given = held.unstarted(started)
            await finish(self, [(call.key, completion) for _, call, completion in ran])
            held.stop()
            for ticket in given:
                await release_quietly(store, ticket)
            raise
        finally:
            held.stop()

    async def _run(
        self, message: Message, call: Call, run: bool, held: BatchHold, n: int
    ) -> tuple[Verdict, Completion | None]:
        """The pipeline's batch form for one message of a batch: its claim decided, its handler
        run while the batch's hold renews its key, a failure settled here; a run's completion
        is the caller's to write, with the batch's."""
        terms = self.delivery.terms
        if not run:  # its verdict decided with the batch's claims
            logs.duplicate(call)
            return call.value, None
        store, ticket = counted(self.guard.store), held.ticket(n)
        if not held.holds(n):
            # Its renewals failed while earlier handlers ran, or it was taken over: the
            # lease may end, and the key be taken over, while this handler would run.
            held.release(n)
            logs.consumer_turn_missed(call.scope, call.key)
            return Retry(self.rules.retry_delay, "lease not held at the handler's turn"), None
        try:
            cancelled = await run_handler(self.handler, self.coroutine, message)
        except BaseException as exc:
            held.release(n)
            step = terms.raised(call, exc)
            verdict = await asettle(store, call, ticket, step, terms)
            if step.error is None:
                return verdict, None
            raise
        step = terms.returned(call, cancelled)
        assert isinstance(step.write, Complete)
        completion = Completion(ticket, step.write.result, step.write.codec, step.write.ttl)
        if cancelled is not None:  # a def ran on in its thread, to its end: completed first
            await finish(self, [(call.key, completion)])
            held.release(n)
            raise cancelled
        return RAN, completion

    async def _settled(self, message: Message, verdict: Verdict) -> Verdict:
        """The verdict the adapter gets for one message (a batch settles each as this does)."""
        final = await self._dead_lettered(message, verdict)
        self._count(final)
        return final

    def _count(self, final: Verdict) -> None:
        """Every verdict, one at a time or batched, is counted here."""
        if observers.metrics is not None:
            observers.metrics.consumed(self.scope, metric_label(final))

    async def _dead_lettered(self, message: Message, verdict: Verdict) -> Verdict:
        if not isinstance(verdict, DeadLetter):
            return verdict
        logs.consumer_dead_letters(message.id, verdict.reason)
        if self.on_dead_letter is None:
            return verdict
        try:
            answer = self.on_dead_letter(message, verdict.reason)
            if inspect.isawaitable(answer):
                await answer
        except Exception as exc:
            logs.dead_letter_hook_failed(exc, message.id)
            return Retry(self.rules.max_retry_delay, f"on_dead_letter raised: {message_of(exc)}")
        return verdict
