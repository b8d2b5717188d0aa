"""The lines of message consumers (mideng.messaging) and of the broker adapters under them.

Each line is declared with the arguments it takes (``fields.Line`` and its kin); the one that
uses an argument twice, in its text and as its traceback, is a function."""

from __future__ import annotations

from collections.abc import Callable

from mideng.observability.logs.fields import (
    Keyed,
    Line,
    Traced,
    contained,
    fields,
    log,
    messaging_log,
)

# -- consumers --------------------------------------------------------------------------------
consumer_attempt_failed: Callable[[str, str, int, BaseException], None] = Keyed(
    log.warning, "attempt_failed", "mideng consumer %s attempt %d raised %r", joined=True
)

#: The handler ran but the store refused its completion: the consumer keeps it and writes it
#: when the message comes back (mideng.messaging.kept_completions).
consumer_uncompleted: Callable[[str, str, BaseException], None] = Keyed(
    log.error,
    "uncompleted",
    "mideng consumer ran %s:%s but could not complete it; the completion is kept: %s",
)

#: More completions kept than the bound: the oldest is dropped, and its message, when it comes
#: back, runs again once the record's lease lapses.
consumer_completion_dropped: Callable[[str, str, int], None] = Keyed(
    log.error,
    "completion_dropped",
    "mideng consumer dropped the kept completion of %s:%s (more than %d kept); its message "
    "runs again once the lease lapses",
)

#: A kept completion is written: the redelivered copy is acked without running.
consumer_completion_written: Callable[[str, str], None] = Keyed(
    log.info, "completion_written", "mideng consumer completed %s:%s from its kept run"
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


consumer_dead_letters: Callable[[str | None, str], None] = Line(
    log.error, "dead_letter", "mideng consumer dead-letters message %r: %s"
)

#: ``on_dead_letter`` raised: the message is retried rather than dropped.
dead_letter_hook_failed: Callable[[BaseException, str | None], None] = Line(
    log.error, "dead_letter_failed", "mideng on_dead_letter raised %r; message %r is retried"
)

#: The handler ran, but its lease lapsed and another caller took the key over: the message is
#: acked, and the taker may run it again.
consumer_claim_lost: Callable[[str, str, BaseException], None] = Keyed(
    log.error, "lease_lost", "mideng consumer ran %s:%s after its claim was lost: %s"
)

#: An interrupted run kept its claim: the next copy waits out the lease.
consumer_release_failed: Callable[[str, str, BaseException], None] = Keyed(
    log.warning, "release_failed", "mideng consumer could not release %s:%s: %s"
)

#: Nothing of the transactional handler committed: the message comes back and runs again.
consumer_transaction_failed: Callable[[str, str, BaseException], None] = Keyed(
    log.warning, "transaction_failed", "mideng consumer transaction for %s failed: %r", joined=True
)

#: The failed attempt is not on the record, so the next copy counts from the old total.
consumer_failure_uncounted: Callable[[str, str, BaseException], None] = Keyed(
    log.warning,
    "failure_uncounted",
    "mideng consumer could not count the failure of %s: %s",
    joined=True,
)

#: A batched message's lease was not renewed while earlier handlers of its batch ran (or was
#: taken over): it is not started, and goes back to the broker.
consumer_turn_missed: Callable[[str, str], None] = Keyed(
    log.warning,
    "lease_lost",
    "mideng consumer did not start %s:%s: its lease was not renewed while its batch ran; the "
    "message goes back",
)


# -- brokers: a line's ``where`` is the broker's own name for the place (a Kafka partition); the
# lines of a consumer's session with its broker carry the failures in a row and the wait before
# the next session.
# -- Kafka -----------------------------------------------------------------------------------
#: The consumer gave no verdict (its store is down): the partition rewinds to them.
kafka_records_unhandled: Callable[[int, str, BaseException], None] = Traced(
    messaging_log.error, "consumer_failed", "consumer failed on %d record(s) of %s"
)

kafka_record_dead_lettered: Callable[[str | None, str], None] = Line(
    messaging_log.warning, "dead_letter", "record %s dead-lettered: %s"
)

#: aiokafka cannot read the record at all (a header name that is not UTF-8): it is never handed
#: to the consumer, and no copy of it can be made; it stays in the topic.
kafka_record_unreadable: Callable[[str, BaseException], None] = Line(
    messaging_log.error, "unreadable", "record %s cannot be read (%r); skipped"
)

#: The record is not skipped without its copy: the partition rewinds and it comes back.
kafka_dead_letter_copy_failed: Callable[[str | None, str, BaseException], None] = Traced(
    messaging_log.error, "dead_letter_failed", "dead-letter copy of %s to %r failed"
)

#: A rebalance took the partition first: its next owner reads these records again and the
#: consumer's records answer them as duplicates.
kafka_offset_uncommitted: Callable[[int, str], None] = Line(
    messaging_log.warning, "uncommitted", "offset %d of %s not committed; it is read again"
)

#: The broker did not answer the group leave (or the join it was in) while stopping: the group
#: drops the member after its session timeout; nothing uncommitted is lost.
kafka_leave_abandoned: Callable[[float], None] = Line(
    messaging_log.warning,
    "leave_abandoned",
    "left the consumer group without the broker's answer after %.1fs",
)


# -- RabbitMQ --------------------------------------------------------------------------------
#: The message is not acked without its copy: it is requeued and dead-lettered again.
rabbitmq_dead_letter_copy_failed: Callable[[str, str | None, BaseException], None] = Traced(
    messaging_log.error,
    "dead_letter_failed",
    "dead-letter copy to %r failed; message %s is requeued",
)

#: The broker requeues what the closed channel held unacked; the finished ones come back as
#: duplicates and are acked without running.
rabbitmq_connection_lost: Callable[[str, int, float, BaseException], None] = Line(
    messaging_log.warning,
    "connection_lost",
    "RabbitMQ connection consuming %r lost (%r); reconnecting in %.2fs (failure %d in a row)",
    fill=lambda queue, failures, delay, exc: (queue, exc, delay, failures),
)

#: The broker closed the consumer's channel (a channel error) with the connection up: it
#: requeued what the channel held unacked, and the consumer starts again as on a lost
#: connection.
rabbitmq_channel_closed: Callable[[str, int, float, BaseException], None] = Line(
    messaging_log.warning,
    "channel_closed",
    "%s, consuming %r; consuming again in %.2fs (failure %d in a row)",
    fill=lambda queue, failures, delay, exc: (exc, queue, delay, failures),
)

#: The broker cancelled the consumer (its queue deleted, say): the queue is declared again as
#: at the start and consumed on a new connection.
rabbitmq_consumer_cancelled: Callable[[str, int, float], None] = Line(
    messaging_log.warning,
    "consumer_cancelled",
    "the broker cancelled the consumer of %r; consuming again in %.2fs (failure %d in a row)",
    fill=lambda queue, failures, delay: (queue, delay, failures),
)

#: Consuming a RabbitMQ queue or a NATS durable again: one line for both.
rabbitmq_reconnected: Callable[[str, int], None] = Line(
    messaging_log.warning, "reconnected", "consuming %r again after %d failure(s)"
)


# -- NATS JetStream ---------------------------------------------------------------------------
#: Nothing was handed out (reconnecting, a JetStream API blip): the fetch is tried again.
nats_fetch_failed: Callable[[str, BaseException], None] = Line(
    messaging_log.warning, "fetch_failed", "JetStream fetch from %r failed (%r); trying again"
)

#: The consumer gave no verdict (its store is down): every message comes back later.
nats_messages_unhandled: Callable[[int, BaseException], None] = Traced(
    messaging_log.error, "consumer_failed", "consumer failed on %d message(s); they come back"
)

#: It comes back after ack_wait and the consumer's record answers it.
nats_settle_failed: Callable[[str | None, BaseException], None] = Traced(
    messaging_log.error, "settle_failed", "settling message %s failed; it is redelivered"
)

#: The message is not terminated without its copy: it comes back and is dead-lettered again.
nats_dead_letter_copy_failed: Callable[[str, str | None, BaseException], None] = Traced(
    messaging_log.error,
    "dead_letter_failed",
    "dead-letter copy to %r failed; message %s comes back",
)

#: A FastStream subscriber's dead-letter copy was refused: the message is kept and comes back.
faststream_dead_letter_copy_failed: Callable[[str, str | None, BaseException], None] = Traced(
    messaging_log.error,
    "dead_letter_failed",
    "dead-letter copy to %r failed; message %s comes back",
)

nats_message_dead_lettered: Callable[[str | None, str], None] = Line(
    messaging_log.warning, "dead_letter", "message %s dead-lettered: %s"
)

#: The in-process broker's consumer gave no verdict (its store is down): they come back later.
memory_messages_unhandled: Callable[[int, BaseException], None] = Traced(
    messaging_log.error, "consumer_failed", "consumer failed on %d message(s); they come back"
)

memory_message_dead_lettered: Callable[[str | None, str], None] = Line(
    messaging_log.warning, "dead_letter", "message %s dead-lettered: %s"
)

#: nats-py gave up reconnecting (or never got through): a new client after the delay; what was
#: fetched and not acked is redelivered after ack_wait.
nats_connection_lost: Callable[[str, int, float, BaseException], None] = Line(
    messaging_log.warning,
    "connection_lost",
    "NATS connection consuming %r lost (%r); connecting again in %.2fs (failure %d in a row)",
    fill=lambda durable, failures, delay, exc: (durable, exc, delay, failures),
)

nats_reconnected = rabbitmq_reconnected

#: The durable was deleted under the consumer (an operator, an inactivity threshold): it is
#: created again from after the ack floor it was last seen at.
nats_durable_created_again: Callable[[str, str, int], None] = Line(
    messaging_log.warning,
    "durable_created_again",
    "JetStream durable %r of stream %r is gone; created again from stream sequence %d",
)


# -- Redis Streams ---------------------------------------------------------------------------
#: Unacked entries stay in this member's pending list: after the reconnect it reads them again
#: and the consumer's records answer the finished ones without running them.
redis_stream_connection_lost: Callable[[str, str, int, float, BaseException], None] = Line(
    messaging_log.warning,
    "connection_lost",
    "Redis connection of member %r on stream %r lost (%r); reconnecting in %.2fs "
    "(failure %d in a row)",
    fill=lambda stream, name, failures, delay, exc: (name, stream, exc, delay, failures),
)

redis_stream_reconnected: Callable[[str, str, int], None] = Line(
    messaging_log.warning,
    "reconnected",
    "member %r on stream %r reconnected after %d failure(s); rereading its pending entries",
    fill=lambda stream, name, failures: (name, stream, failures),
)

#: At stop, the XACK of the last settled entries met a lost connection: they stay in this
#: member's pending list, and its next run (or a takeover once idle) acks them unrun.
redis_stream_left_pending: Callable[[str, str, int, BaseException], None] = Line(
    messaging_log.warning,
    "left_pending",
    "member %r on stream %r stopped with %d settled entries unacked (%r): left pending",
    fill=lambda stream, name, count, exc: (name, stream, count, exc),
)
