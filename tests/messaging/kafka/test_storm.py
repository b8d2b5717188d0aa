"""Kafka storm: 2,000 messages over 1,500 business keys (the rest re-published as new
broker messages), three transactional consumer processes on PostgreSQL in one consumer group,
one of them SIGKILLed at random points five times (a rebalance each time) and restarted. At the
end every key has exactly one committed effect, every record succeeded, every worker stopped
cleanly on SIGTERM, and the group's committed offsets reach the end of every partition."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.storm import check_storm, run_storm, tables
from tests.messaging.kafka.conftest import PARTITIONS, KafkaSide
from tests.services import POSTGRES_URL, need

pytestmark = pytest.mark.slow


def test_storm_one_effect_per_key_with_kills(kafka_side: KafkaSide, tmp_path: Path) -> None:
    need("postgresql")
    with tables(POSTGRES_URL) as db:
        result = run_storm(kafka_side, db, tmp_path)
    check_storm(result)
    assert kafka_side.lag() == dict.fromkeys(range(PARTITIONS), 0)  # every offset committed
