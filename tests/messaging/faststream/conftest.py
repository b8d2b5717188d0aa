from __future__ import annotations

from tests.brokers import broker_names, kafka_broker  # noqa: F401  (fixtures)
