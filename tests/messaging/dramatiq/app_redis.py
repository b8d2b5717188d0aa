"""The Dramatiq storm job on Redis (a worker runs ``dramatiq`` on this module)."""

from __future__ import annotations

import dramatiq

from tests.messaging.dramatiq.app import redis_broker, storm_job

broker = redis_broker()
dramatiq.set_broker(broker)
touch = storm_job(broker, "redis")
