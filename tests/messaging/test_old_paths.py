"""The import paths messaging had before each broker was a package, and before its modules were
named for what they hold, still answer for one release, each with a DeprecationWarning naming
the new one (``MOVED``, checked with every other package's in tests/test_moved.py)."""

from __future__ import annotations

from mideng.messaging import batch_claims, handlers, kept_completions, verdict
from mideng.messaging.kafka import publish as kafka_publish
from mideng.messaging.nats import publish as nats_publish
from mideng.messaging.rabbitmq import publish as rabbitmq_publish
from mideng.messaging.redis_streams import message as redis_message
from mideng.messaging.redis_streams import publish as redis_publish

MOVED = [
    ("mideng.messaging.publish.amqp", "AmqpPublisher", rabbitmq_publish.AmqpPublisher),
    ("mideng.messaging.publish.nats", "NatsPublisher", nats_publish.NatsPublisher),
    ("mideng.messaging.publish.nats", "MSG_ID", nats_publish.MSG_ID),
    ("mideng.messaging.publish.redis", "RedisPublisher", redis_publish.RedisPublisher),
    ("mideng.messaging.publish.kafka", "KafkaPublisher", kafka_publish.KafkaPublisher),
    ("mideng.messaging.publish.kafka", "bootstrap", kafka_publish.bootstrap),
    ("mideng.messaging.outcome", "RetryRules", verdict.RetryRules),
    ("mideng.messaging.outcome", "standing", verdict.standing),
    ("mideng.messaging.batch", "claim_all", batch_claims.claim_all),
    ("mideng.messaging.holds", "BatchHold", batch_claims.BatchHold),
    ("mideng.messaging.turns", "run_handler", handlers.run_handler),
    ("mideng.messaging.unwritten", "Unwritten", kept_completions.Unwritten),
    ("mideng.messaging.unwritten", "HELD_LIMIT", kept_completions.HELD_LIMIT),
    ("mideng.messaging.redis_read", "CompactReader", redis_message.CompactReader),
    ("mideng.messaging.redis_read", "entries", redis_message.entries),
]


def test_a_broker_module_is_its_package_now_and_answers_as_before() -> None:
    from mideng.messaging.kafka import DEAD_LETTER_REASON, bootstrap_servers, consume
    from mideng.messaging.rabbitmq import DEAD_REASON, message_of

    assert consume.__module__ == "mideng.messaging.kafka.consume"
    assert bootstrap_servers("kafka://a:1") == "a:1"
    assert (DEAD_LETTER_REASON, DEAD_REASON) == ("x-dead-letter-reason", "x-dead-reason")
    assert message_of.__module__ == "mideng.messaging.rabbitmq.message"
