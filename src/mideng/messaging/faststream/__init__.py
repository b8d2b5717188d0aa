"""FastStream: ``IdempotentMiddleware`` puts an ``IdempotentConsumer`` in front of every
subscriber of a broker or router (Kafka, RabbitMQ, NATS, Redis); ``settling`` says how each
broker carries out the consumer's verdicts. ``pip install 'mideng[faststream]'``."""

from mideng.messaging.faststream.middleware import CONNECTION, Connection, IdempotentMiddleware

__all__ = ["CONNECTION", "Connection", "IdempotentMiddleware"]
