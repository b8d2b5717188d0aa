from __future__ import annotations

import pytest

from tests.brokers import (  # noqa: F401  (fixtures)
    BrokerNames,
    KafkaBroker,
    broker_names,
    kafka_broker,
)
from tests.messaging.kafka.broker import Kafka


@pytest.fixture
def kafka_side(broker_names: BrokerNames, kafka_broker: KafkaBroker) -> Kafka:  # noqa: F811
    return Kafka(broker_names.kafka(kafka_broker))
