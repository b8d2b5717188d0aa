"""The lines of message consumers (mideng.messaging) and of the broker adapters under them."""

from __future__ import annotations

from mideng.observability.logs.fields import contained, fields, log, messaging_log


# -- consumers --------------------------------------------------------------------------------
@contained
def consumer_attempt_failed(scope: str, key: str, attempt: int, exc: BaseException) -> None:
    log.warning(
        "mideng consumer %s attempt %d raised %r",
        f"{scope}:{key}",
        attempt,
        exc,
        extra=fields(scope, key, "attempt_failed"),
    )


@contained
def consumer_uncompleted(scope: str, key: str, exc: BaseException) -> None:
    """The handler ran but the store refused its completion: the consumer keeps it and writes
    it when the message comes back (mideng.messaging.unwritten)."""
    log.error(
        "mideng consumer ran %s:%s but could not complete it; the completion is kept: %s",
        scope,
        key,
        exc,
        extra=fields(scope, key, "uncompleted"),
    )


@contained
def consumer_completion_dropped(scope: str, key: str, limit: int) -> None:
    """More completions kept than the bound: the oldest is dropped, and its message, when it
    comes back, runs again once the record's lease lapses."""
    log.error(
        "mideng consumer dropped the kept completion of %s:%s (more than %d kept); its message "
        "runs again once the lease lapses",
        scope,
        key,
        limit,
        extra=fields(scope, key, "completion_dropped"),
    )


@contained
def consumer_completion_written(scope: str, key: str) -> None:
    """A kept completion is written: the redelivered copy is acked without running."""
    log.info(
        "mideng consumer completed %s:%s from its kept run",
        scope,
        key,
        extra=fields(scope, key, "completion_written"),
    )


@contained
def consumer_undecided(scope: str, count: int, exc: BaseException) -> None:
    """A store or driver failure left messages without a verdict: they come back later."""
    log.error(
        "mideng consumer %s could not decide %d message(s), they come back: %r",
        scope,
        count,
        exc,
        exc_info=exc,
        extra=fields(scope, None, "undecided"),
    )


@contained
def consumer_dead_letters(message_id: str | None, reason: str) -> None:
    log.error(
        "mideng consumer dead-letters message %r: %s",
        message_id,
        reason,
        extra=fields(outcome="dead_letter"),
    )


@contained
def dead_letter_hook_failed(exc: BaseException, message_id: str | None) -> None:
    """``on_dead_letter`` raised: the message is retried rather than dropped."""
    log.error(
        "mideng on_dead_letter raised %r; message %r is retried",
        exc,
        message_id,
        extra=fields(outcome="dead_letter_failed"),
    )


@contained
def consumer_claim_lost(scope: str, key: str, exc: BaseException) -> None:
    """The handler ran, but its lease lapsed and another caller took the key over: the
    message is acked, and the taker may run it again."""
    log.error(
        "mideng consumer ran %s:%s after its claim was lost: %s",
        scope,
        key,
        exc,
        extra=fields(scope, key, "lease_lost"),
    )


@contained
def consumer_release_failed(scope: str, key: str, exc: BaseException) -> None:
    """An interrupted run kept its claim: the next copy waits out the lease."""
    log.warning(
        "mideng consumer could not release %s:%s: %s",
        scope,
        key,
        exc,
        extra=fields(scope, key, "release_failed"),
    )


@contained
def consumer_transaction_failed(scope: str, key: str, exc: BaseException) -> None:
    """Nothing of the transactional handler committed: the message comes back and runs again."""
    log.warning(
        "mideng consumer transaction for %s failed: %r",
        f"{scope}:{key}",
        exc,
        extra=fields(scope, key, "transaction_failed"),
    )


@contained
def consumer_failure_uncounted(scope: str, key: str, exc: BaseException) -> None:
    """The failed attempt is not on the record, so the next copy counts from the old total."""
    log.warning(
        "mideng consumer could not count the failure of %s: %s",
        f"{scope}:{key}",
        exc,
        extra=fields(scope, key, "failure_uncounted"),
    )


# -- brokers: a line's ``where`` is the broker's own name for the place (a Kafka partition) ---
@contained
def kafka_records_unhandled(count: int, partition: str, exc: BaseException) -> None:
    """The consumer gave no verdict (its store is down): the partition rewinds to them."""
    messaging_log.error(
        "consumer failed on %d record(s) of %s",
        count,
        partition,
        exc_info=exc,
        extra=fields(outcome="consumer_failed"),
    )


@contained
def kafka_record_dead_lettered(message_id: str | None, reason: str) -> None:
    messaging_log.warning(
        "record %s dead-lettered: %s", message_id, reason, extra=fields(outcome="dead_letter")
    )


@contained
def kafka_record_unreadable(message_id: str, exc: BaseException) -> None:
    """aiokafka cannot read the record at all (a header name that is not UTF-8): it is never
    handed to the consumer, and no copy of it can be made; it stays in the topic."""
    messaging_log.error(
        "record %s cannot be read (%r); skipped",
        message_id,
        exc,
        extra=fields(outcome="unreadable"),
    )


@contained
def kafka_dead_letter_copy_failed(message_id: str | None, topic: str, exc: BaseException) -> None:
    """The record is not skipped without its copy: the partition rewinds and it comes back."""
    messaging_log.error(
        "dead-letter copy of %s to %r failed",
        message_id,
        topic,
        exc_info=exc,
        extra=fields(outcome="dead_letter_failed"),
    )


@contained
def kafka_offset_uncommitted(offset: int, partition: str) -> None:
    """A rebalance took the partition first: its next owner reads these records again and the
    consumer's records answer them as duplicates."""
    messaging_log.warning(
        "offset %d of %s not committed; it is read again",
        offset,
        partition,
        extra=fields(outcome="uncommitted"),
    )


@contained
def kafka_leave_abandoned(seconds: float) -> None:
    """The broker did not answer the group leave (or the join it was in) while stopping: the
    group drops the member after its session timeout; nothing uncommitted is lost."""
    messaging_log.warning(
        "left the consumer group without the broker's answer after %.1fs",
        seconds,
        extra=fields(outcome="leave_abandoned"),
    )


@contained
def nats_fetch_failed(durable: str, exc: BaseException) -> None:
    """Nothing was handed out (reconnecting, a JetStream API blip): the fetch is tried again."""
    messaging_log.warning(
        "JetStream fetch from %r failed (%r); trying again",
        durable,
        exc,
        extra=fields(outcome="fetch_failed"),
    )


@contained
def nats_messages_unhandled(count: int, exc: BaseException) -> None:
    """The consumer gave no verdict (its store is down): every message comes back later."""
    messaging_log.error(
        "consumer failed on %d message(s); they come back",
        count,
        exc_info=exc,
        extra=fields(outcome="consumer_failed"),
    )


@contained
def nats_settle_failed(message_id: str | None, exc: BaseException) -> None:
    """It comes back after ack_wait and the consumer's record answers it."""
    messaging_log.error(
        "settling message %s failed; it is redelivered",
        message_id,
        exc_info=exc,
        extra=fields(outcome="settle_failed"),
    )


@contained
def rabbitmq_dead_letter_copy_failed(
    queue: str, message_id: str | None, exc: BaseException
) -> None:
    """The message is not acked without its copy: it is requeued and dead-lettered again."""
    messaging_log.error(
        "dead-letter copy to %r failed; message %s is requeued",
        queue,
        message_id,
        exc_info=exc,
        extra=fields(outcome="dead_letter_failed"),
    )


@contained
def nats_dead_letter_copy_failed(subject: str, message_id: str | None, exc: BaseException) -> None:
    """The message is not terminated without its copy: it comes back and is dead-lettered
    again."""
    messaging_log.error(
        "dead-letter copy to %r failed; message %s comes back",
        subject,
        message_id,
        exc_info=exc,
        extra=fields(outcome="dead_letter_failed"),
    )


@contained
def nats_message_dead_lettered(message_id: str | None, reason: str) -> None:
    messaging_log.warning(
        "message %s dead-lettered: %s", message_id, reason, extra=fields(outcome="dead_letter")
    )


@contained
def redis_stream_connection_lost(
    stream: str, name: str, failures: int, delay: float, exc: BaseException
) -> None:
    """Unacked entries stay in this member's pending list: after the reconnect it reads them
    again and the consumer's records answer the finished ones without running them."""
    messaging_log.warning(
        "Redis connection of member %r on stream %r lost (%r); reconnecting in %.2fs "
        "(failure %d in a row)",
        name,
        stream,
        exc,
        delay,
        failures,
        extra=fields(outcome="connection_lost"),
    )


@contained
def redis_stream_reconnected(stream: str, name: str, failures: int) -> None:
    messaging_log.warning(
        "member %r on stream %r reconnected after %d failure(s); rereading its pending entries",
        name,
        stream,
        failures,
        extra=fields(outcome="reconnected"),
    )


@contained
def rabbitmq_connection_lost(queue: str, failures: int, delay: float, exc: BaseException) -> None:
    """The broker requeues what the closed channel held unacked; the finished ones come back
    as duplicates and are acked without running."""
    messaging_log.warning(
        "RabbitMQ connection consuming %r lost (%r); reconnecting in %.2fs (failure %d in a row)",
        queue,
        exc,
        delay,
        failures,
        extra=fields(outcome="connection_lost"),
    )


@contained
def rabbitmq_reconnected(queue: str, failures: int) -> None:
    messaging_log.warning(
        "consuming %r again after %d failure(s)",
        queue,
        failures,
        extra=fields(outcome="reconnected"),
    )


@contained
def rabbitmq_consumer_cancelled(queue: str, failures: int, delay: float) -> None:
    """The broker cancelled the consumer (its queue deleted, say): the queue is declared again
    as at the start and consumed on a new connection."""
    messaging_log.warning(
        "the broker cancelled the consumer of %r; consuming again in %.2fs (failure %d in a row)",
        queue,
        delay,
        failures,
        extra=fields(outcome="consumer_cancelled"),
    )


@contained
def rabbitmq_channel_closed(queue: str, failures: int, delay: float, exc: BaseException) -> None:
    """The broker closed the consumer's channel (a channel error) with the connection up: it
    requeued what the channel held unacked, and the consumer starts again as on a lost
    connection."""
    messaging_log.warning(
        "%s, consuming %r; consuming again in %.2fs (failure %d in a row)",
        exc,
        queue,
        delay,
        failures,
        extra=fields(outcome="channel_closed"),
    )


@contained
def nats_connection_lost(durable: str, failures: int, delay: float, exc: BaseException) -> None:
    """nats-py gave up reconnecting (or never got through): a new client after the delay; what
    was fetched and not acked is redelivered after ack_wait."""
    messaging_log.warning(
        "NATS connection consuming %r lost (%r); connecting again in %.2fs (failure %d in a row)",
        durable,
        exc,
        delay,
        failures,
        extra=fields(outcome="connection_lost"),
    )


@contained
def nats_reconnected(durable: str, failures: int) -> None:
    messaging_log.warning(
        "consuming %r again after %d failure(s)",
        durable,
        failures,
        extra=fields(outcome="reconnected"),
    )


@contained
def nats_durable_created_again(durable: str, stream: str, start: int) -> None:
    """The durable was deleted under the consumer (an operator, an inactivity threshold): it is
    created again from after the ack floor it was last seen at."""
    messaging_log.warning(
        "JetStream durable %r of stream %r is gone; created again from stream sequence %d",
        durable,
        stream,
        start,
        extra=fields(outcome="durable_created_again"),
    )


@contained
def consumer_turn_missed(scope: str, key: str) -> None:
    """A batched message's lease was not renewed while earlier handlers of its batch ran (or
    was taken over): it is not started, and goes back to the broker."""
    log.warning(
        "mideng consumer did not start %s:%s: its lease was not renewed while its batch ran; "
        "the message goes back",
        scope,
        key,
        extra=fields(scope, key, "lease_lost"),
    )


@contained
def redis_stream_left_pending(stream: str, name: str, count: int, exc: BaseException) -> None:
    """At stop, the XACK of the last settled entries met a lost connection: they stay in this
    member's pending list, and its next run (or a takeover once idle) acks them unrun."""
    messaging_log.warning(
        "member %r on stream %r stopped with %d settled entries unacked (%r): left pending",
        name,
        stream,
        count,
        exc,
        extra=fields(outcome="left_pending"),
    )
