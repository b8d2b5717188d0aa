"""The two crash points of a transactional consumer on every broker, each shown with a real
SIGKILL there (tests/helpers/storm.py: ``crash_case`` runs it, ``check_crash`` says what
each must show). Before the commit, the redelivery runs the message again, once; after the
commit and before the ack, the redelivery is acked without running."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.brokers import BrokerNames, broker_names, kafka_broker  # noqa: F401  (fixtures)
from tests.helpers.storm import Side, check_crash, crash_case, tables
from tests.messaging.kafka.conftest import KafkaSide
from tests.messaging.nats.conftest import NatsSide
from tests.messaging.rabbitmq.conftest import RabbitSide
from tests.messaging.redis_streams.conftest import StreamSide
from tests.services import POSTGRES_URL, need

pytestmark = pytest.mark.slow


@pytest.fixture(params=["rabbitmq", "nats", "redis_streams", "kafka"])
def side(request: pytest.FixtureRequest, broker_names: BrokerNames) -> Any:  # noqa: F811
    if request.param == "rabbitmq":
        return RabbitSide(broker_names)
    if request.param == "nats":
        return NatsSide(broker_names.nats())
    if request.param == "redis_streams":
        return StreamSide(broker_names)
    return KafkaSide(broker_names.kafka(request.getfixturevalue("kafka_broker")))


@pytest.mark.parametrize("at", ["before_commit", "after_commit"])
def test_killed_at_a_crash_point(side: Side, tmp_path: Path, at: str) -> None:
    need("postgresql")
    with tables(POSTGRES_URL) as db:
        check_crash(crash_case(side, db, tmp_path, at))
