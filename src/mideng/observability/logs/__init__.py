"""Every log line mideng writes, in one package, each with its fields on the record.

Every line carries ``mideng_request_id``, ``mideng_scope``, ``mideng_key`` and
``mideng_outcome`` as LogRecord attributes (None where a line has no such thing), so a JSON
formatter or structlog's ``ExtraAdder`` gets them as fields, and ``MidengFields`` (a filter)
puts them on any other logger's records too. Every duplicate is a WARNING with scope, key,
outcome and both request ids (this call's and the one that did the work), so a duplicate can
be traced back to its first request.

This package is a leaf: it imports nothing from mideng but ``errors`` and ``context``, so
callers hand it plain values (any object with ``scope`` and ``key`` attributes is a call).

By area: ``fields`` (the loggers and the four fields), ``calls`` (the Guard, heartbeats,
stores, HTTP, operator views, operations, business tables), ``messaging`` (consumers and
broker adapters), ``outbox`` (the relay).
"""

from __future__ import annotations

from mideng.observability.logs.calls import (
    CallLike,
    duplicate,
    duplicate_insert,
    fail_open,
    heartbeat_failed,
    heartbeat_lapsed,
    heartbeat_lost,
    heartbeat_recovered,
    heartbeat_thread_died,
    reconcile_failed,
    redis_copy_kept,
    redis_down,
    response_unguarded,
    response_unstored,
    rollback_failed,
    stale_task,
    statement_rollback_failed,
    steps_kept,
    stuck_record,
    unsettled,
)
from mideng.observability.logs.fields import (
    FIELDS,
    MidengFields,
    fields,
    http_log,
    log,
    messaging_log,
    outbox_log,
    to_stderr,
)
from mideng.observability.logs.messaging import (
    consumer_attempt_failed,
    consumer_claim_lost,
    consumer_dead_letters,
    consumer_failure_uncounted,
    consumer_release_failed,
    consumer_transaction_failed,
    consumer_uncompleted,
    dead_letter_hook_failed,
    kafka_dead_letter_copy_failed,
    kafka_leave_abandoned,
    kafka_offset_uncommitted,
    kafka_record_dead_lettered,
    kafka_records_unhandled,
    nats_connection_lost,
    nats_dead_letter_copy_failed,
    nats_fetch_failed,
    nats_message_dead_lettered,
    nats_messages_unhandled,
    nats_reconnected,
    nats_settle_failed,
    rabbitmq_connection_lost,
    rabbitmq_reconnected,
    redis_stream_connection_lost,
    redis_stream_reconnected,
)
from mideng.observability.logs.outbox import (
    listen_lost,
    listen_unavailable,
    publish_failed,
    purge_failed,
    relay_batch_failed,
)

__all__ = [
    "CallLike",
    "FIELDS",
    "MidengFields",
    "consumer_attempt_failed",
    "consumer_claim_lost",
    "consumer_dead_letters",
    "consumer_failure_uncounted",
    "consumer_release_failed",
    "consumer_transaction_failed",
    "consumer_uncompleted",
    "dead_letter_hook_failed",
    "duplicate",
    "duplicate_insert",
    "fail_open",
    "fields",
    "heartbeat_failed",
    "heartbeat_lapsed",
    "heartbeat_lost",
    "heartbeat_recovered",
    "heartbeat_thread_died",
    "http_log",
    "kafka_dead_letter_copy_failed",
    "kafka_leave_abandoned",
    "kafka_offset_uncommitted",
    "kafka_record_dead_lettered",
    "kafka_records_unhandled",
    "listen_lost",
    "listen_unavailable",
    "log",
    "messaging_log",
    "nats_connection_lost",
    "nats_dead_letter_copy_failed",
    "nats_fetch_failed",
    "nats_message_dead_lettered",
    "nats_messages_unhandled",
    "nats_reconnected",
    "nats_settle_failed",
    "outbox_log",
    "publish_failed",
    "purge_failed",
    "rabbitmq_connection_lost",
    "rabbitmq_reconnected",
    "reconcile_failed",
    "redis_copy_kept",
    "redis_down",
    "redis_stream_connection_lost",
    "redis_stream_reconnected",
    "relay_batch_failed",
    "response_unguarded",
    "response_unstored",
    "rollback_failed",
    "stale_task",
    "statement_rollback_failed",
    "steps_kept",
    "stuck_record",
    "to_stderr",
    "unsettled",
]
