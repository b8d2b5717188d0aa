"""The Dramatiq storm job on RabbitMQ (a worker runs ``dramatiq`` on this module)."""

from __future__ import annotations

import dramatiq

from tests.messaging.dramatiq.app import rabbitmq_broker, storm_job

broker = rabbitmq_broker()
dramatiq.set_broker(broker)
touch = storm_job(broker, "rabbitmq")
