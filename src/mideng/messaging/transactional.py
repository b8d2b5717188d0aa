"""The transactional consumer: the handler's writes and the dedup record commit together.

Each message is one transaction on a connection of the consumer's engine: claim the key
there (mideng.guard.transaction), run ``handler(message, conn)``, write the record, commit;
the adapter acks only after that. A crash before the commit rolls everything back, so the
redelivery runs it again; a crash after the commit, before the ack, leaves the record, so the
redelivery is acked without running. With an Engine the handler is a ``def`` run off the event
loop; with an AsyncEngine an ``async def`` awaited on it.

With a Django database alias (``engine="default"``) the handler is a ``def`` that gets Django's
connection: the claim, the handler's ORM writes (and any outbox row or state change it makes
on that connection) and the record are one ``transaction.atomic()`` block, run whole in
Django's thread for the ORM (see ``_in_djangos_thread``).

A handler error rolls the transaction back, record and all; the attempt is then counted in the
same record table outside the transaction (a claim kept for the backoff, or the failure once
the attempts are used up), so the next run knows how many came before it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from mideng.core.event_loop import to_thread
from mideng.core.failure import encode_failure, message_of
from mideng.core.policy import Policy
from mideng.core.record import Ticket
from mideng.db.django_connection import django_connection, is_django_connection
from mideng.errors import (
    ConfigurationError,
    IdempotencyError,
    InProgressError,
    RecordedFailureError,
    UnresolvedError,
)
from mideng.guard.driver import Driver
from mideng.guard.transaction import atransaction, transaction
from mideng.messaging.message import Message
from mideng.messaging.verdict import (
    MIN_DELAY,
    Ack,
    DeadLetter,
    Retry,
    RetryRules,
    Verdict,
    after_failure,
)
from mideng.observability import logs
from mideng.observability.store_metrics import counted


class TransactionalConsumer(Protocol):
    """A consumer with an engine, as this module reads it
    (mideng.messaging.consumer.IdempotentConsumer)."""

    guard: Driver
    scope: str
    handler: Callable[..., Any]
    engine: Any
    rules: RetryRules
    options: dict[str, Any]
    policy: Policy
    coroutine: bool
    async_engine: bool
    django_alias: str | None


@dataclass(slots=True)
class _HandlerFailed(Exception):
    """The handler raised inside the transaction (which then rolled back)."""

    error: Exception
    attempt: int


def django_alias(engine: Any) -> str | None:
    """The Django database alias ``engine`` names (an alias, or a connection: its alias, since
    each thread has its own connection of it), or None for a SQLAlchemy engine."""
    if engine is None or not is_django_connection(engine):
        return None
    return str(django_connection(engine).alias)


def check(consumer: TransactionalConsumer) -> None:
    """Refuse, at construction, a consumer that could never run."""
    if getattr(consumer.guard.store, "record_table", None) is None:
        raise ConfigurationError(
            "engine= needs a Guard over a SQL or SQLite store: the dedup record is a row of its "
            "record table, written in the handler's transaction"
        )
    if consumer.django_alias is not None:
        if consumer.coroutine:
            raise ConfigurationError(
                "a Django connection runs a def handler(message, conn), in Django's thread for "
                "the ORM: its connections are per thread and blocking"
            )
        return
    if consumer.async_engine and not consumer.coroutine:
        raise ConfigurationError("an AsyncEngine needs an async def handler(message, conn)")
    if not consumer.async_engine and consumer.coroutine:
        raise ConfigurationError("an Engine runs a def handler(message, conn) off the event loop")


async def handle(consumer: TransactionalConsumer, message: Message, key: str) -> Verdict:
    try:
        if consumer.django_alias is not None:
            return await _in_djangos_thread(consumer, message, key)
        if consumer.async_engine:
            return await _arun(consumer, message, key)
        # to_thread copies the context: the request id goes with the handler.
        return await to_thread(_run, consumer, message, key)
    except _HandlerFailed as failed:
        return await _count_failure(consumer, key, failed)
    except Exception as exc:
        return _refused(consumer, key, exc)


# A transaction that failed other than by the handler's own error (a refused claim, a lost
# connection, a failed COMMIT) may leave the pooled connection inside a transaction SQLAlchemy
# no longer tracks, holding the uncommitted record and writes; the next message on that
# connection would commit them with its own. So that connection is dropped, never pooled.
def _run(consumer: TransactionalConsumer, message: Message, key: str) -> Verdict:
    with consumer.engine.connect() as conn:
        try:
            return _in_transaction(consumer, message, key, conn)
        except _HandlerFailed:
            raise  # rolled back in full by the block
        except BaseException:
            conn.invalidate()  # never back to the pool (above)
            raise


def _in_transaction(
    consumer: TransactionalConsumer, message: Message, key: str, conn: Any
) -> Verdict:
    """Claim, run the handler, write the record, commit: one transaction on ``conn``."""
    with transaction(consumer.guard, conn, consumer.scope, key, **consumer.options) as tx:
        if tx.replayed:
            return Ack(ran=False)
        attempt = tx.record.attempts if tx.record is not None else 1
        try:
            consumer.handler(message, conn)
        except Exception as exc:
            raise _HandlerFailed(exc, attempt) from exc
    return Ack(ran=True)


async def _in_djangos_thread(
    consumer: TransactionalConsumer, message: Message, key: str
) -> Verdict:
    """The message's whole transaction in the one thread Django runs ORM code from async code
    in (``sync_to_async(thread_sensitive=True)``, as an async view reaches the ORM).

    A Django connection belongs to the thread that opened it, and an atomic block lives on
    that connection: the claim, the handler's ORM writes and the record's statements must be
    sent from one thread, on one connection, so the call carries the whole block (claim to
    commit) rather than single statements. In that thread calls run one after another, never
    interleaved, so two messages never share an open transaction, and the connection is the
    same one the project's other ORM code from async code uses, closed by the same rules.
    The context (the request id) goes with the call."""
    from asgiref.sync import sync_to_async

    run = sync_to_async(_run_django, thread_sensitive=True)
    return await run(consumer, message, key)


def _run_django(consumer: TransactionalConsumer, message: Message, key: str) -> Verdict:
    from django.db import connections

    assert consumer.django_alias is not None
    conn = connections[consumer.django_alias]  # this thread's
    if not conn.get_autocommit():
        # Inside an open transaction the block would be a savepoint of it, and the ack
        # would come before anything committed.
        raise ConfigurationError(
            f"Django's connection {consumer.django_alias!r} is inside a transaction in the "
            "consumer's thread: each message must commit its own atomic block before its ack"
        )
    # As Django does around each request: a connection that broke, or outlived CONN_MAX_AGE,
    # is closed, and the next statement opens a fresh one.
    conn.close_if_unusable_or_obsolete()
    try:
        return _in_transaction(consumer, message, key, conn)
    finally:
        conn.close_if_unusable_or_obsolete()


async def _arun(consumer: TransactionalConsumer, message: Message, key: str) -> Verdict:
    async with consumer.engine.connect() as conn:
        try:
            async with atransaction(
                consumer.guard, conn, consumer.scope, key, **consumer.options
            ) as tx:
                if tx.replayed:
                    return Ack(ran=False)
                attempt = tx.record.attempts if tx.record is not None else 1
                try:
                    await consumer.handler(message, conn)
                except Exception as exc:
                    raise _HandlerFailed(exc, attempt) from exc
        except _HandlerFailed:
            raise
        except BaseException:
            await conn.invalidate()  # never back to the pool (above)
            raise
    return Ack(ran=True)


def _refused(consumer: TransactionalConsumer, key: str, exc: Exception) -> Verdict:
    """The claim itself said no, or the transaction failed before or at its commit."""
    where = f"{consumer.scope}:{key}"
    rules = consumer.rules
    if isinstance(exc, InProgressError):
        delay = min(exc.retry_after or rules.in_flight_delay, rules.in_flight_delay)
        return Retry(max(delay, MIN_DELAY), f"{where} is in flight")
    if isinstance(exc, UnresolvedError):
        return Retry(rules.max_retry_delay, f"{where} is unresolved; resolve it to go on")
    if isinstance(exc, RecordedFailureError) or getattr(exc, "__mideng_replayed__", False):
        return DeadLetter(f"{where} failed before and was given up on: {message_of(exc)}")
    # A lost connection, a deadlock past its retries, a failed commit: nothing committed, so
    # the message comes back and runs again.
    logs.consumer_transaction_failed(consumer.scope, key, exc)
    return Retry(
        rules.retry_delay, f"{where} transaction failed: {type(exc).__name__}: {message_of(exc)}"
    )


async def _count_failure(
    consumer: TransactionalConsumer, key: str, failed: _HandlerFailed
) -> Verdict:
    where = f"{consumer.scope}:{key}"
    exc, attempt = failed.error, failed.attempt
    logs.consumer_attempt_failed(consumer.scope, key, attempt, exc)
    store, policy = counted(consumer.guard.store), consumer.policy
    call = consumer.guard.prepare(consumer.scope, key, consumer.handler, None, policy)
    try:
        claim = await store.aclaim(call.request())
    except IdempotencyError as store_exc:
        logs.consumer_failure_uncounted(consumer.scope, key, store_exc)
        return after_failure(where, attempt, exc, consumer.rules)
    if not claim.acquired:
        # A copy got in between the rollback and here; it decides. This one comes back later.
        return Retry(consumer.rules.in_flight_delay, f"{where} attempt {attempt} failed: {exc!r}")
    attempt = max(attempt, claim.record.attempts)
    verdict = after_failure(where, attempt, exc, consumer.rules)
    ticket = Ticket.of(claim.record)
    try:
        if isinstance(verdict, DeadLetter):
            await store.afail(ticket, encode_failure(exc), policy.ttl)
        else:
            assert isinstance(verdict, Retry)
            await store.aheartbeat(ticket, verdict.delay, policy.ttl)
    except IdempotencyError as store_exc:
        logs.consumer_failure_uncounted(consumer.scope, key, store_exc)
    return verdict
