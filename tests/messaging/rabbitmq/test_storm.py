"""RabbitMQ storm: 2,000 messages over 1,500 business keys (the rest re-published as new
broker messages), three transactional consumer processes on PostgreSQL sharing one queue, one
of them SIGKILLed at random points five times and restarted. At the end every key has exactly
one committed effect, every record succeeded, every worker stopped cleanly on SIGTERM, and the
queue holds nothing ready or unacked. (The crash points: tests/messaging/test_crashes.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.brokers import BrokerNames
from tests.helpers.storm import check_storm, run_storm, tables
from tests.messaging.rabbitmq.conftest import RabbitSide
from tests.services import POSTGRES_URL, need

pytestmark = pytest.mark.slow


def test_storm_with_kills_on_postgresql(broker_names: BrokerNames, tmp_path: Path) -> None:
    need("postgresql")
    side = RabbitSide(broker_names)
    with tables(POSTGRES_URL) as db:
        result = run_storm(side, db, tmp_path, between_kills=(0.3, 1.2), timeout=150)
    check_storm(result)
    assert side.settled()
