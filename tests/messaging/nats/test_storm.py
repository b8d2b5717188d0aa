"""JetStream storm: 2,000 messages over 1,500 business keys (the rest re-published as new
broker messages), three transactional consumer processes sharing one durable (on PostgreSQL,
and on MariaDB), one of them SIGKILLed at random points five times and restarted. At the end
every key has exactly one committed effect, every record succeeded, every worker stopped
cleanly on SIGTERM, and the durable holds nothing pending or unacked."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.storm import check_storm, on_each_database, run_storm, tables
from tests.messaging.nats.conftest import NatsSide
from tests.services import need

pytestmark = pytest.mark.slow


@on_each_database
def test_storm_one_effect_per_key_with_kills(
    nats_side: NatsSide, tmp_path: Path, service: str, url: str
) -> None:
    need(service)
    with tables(url) as db:
        result = run_storm(nats_side, db, tmp_path, between_kills=(0.1, 0.6))
    check_storm(result)
    info = nats_side.info()
    assert (info.num_pending, info.num_ack_pending) == (0, 0)
