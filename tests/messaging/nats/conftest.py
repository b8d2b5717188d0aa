from __future__ import annotations

import pytest

from tests.brokers import BrokerNames, broker_names  # noqa: F401  (fixture)
from tests.messaging.nats.broker import JetStream


@pytest.fixture
def nats_side(broker_names: BrokerNames) -> JetStream:  # noqa: F811
    return JetStream(broker_names.nats())
