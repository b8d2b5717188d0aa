"""JetStream storm: 2,000 messages over 1,500 business keys (the rest re-published as new
broker messages), three transactional consumer processes sharing one durable (on PostgreSQL,
and on MariaDB), one of them SIGKILLed at random points five times and restarted. At the end
every key has exactly one committed effect, every record succeeded, and the durable holds
nothing pending or unacked."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.storm import run_storm, tables
from tests.messaging.nats.conftest import NatsSide
from tests.services import MYSQL_URL, POSTGRES_URL, need

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("service", "url"),
    [("postgresql", POSTGRES_URL), ("mysql", MYSQL_URL)],
    ids=["postgresql", "mariadb"],
)
def test_storm_one_effect_per_key_with_kills(
    nats_side: NatsSide, tmp_path: Path, service: str, url: str
) -> None:
    need(service)
    with tables(url) as db:
        result = run_storm(nats_side, db, tmp_path, between_kills=(0.1, 0.6))
    assert len(result.kills) == 5
    assert 0 < result.kills[0] < 1500, "the first kill came before or after all the work"
    assert len(result.effects) == 1500
    assert set(result.effects) == {f"order:{n}" for n in range(1500)}
    assert [key for key, runs in result.effects.items() if runs != 1] == []
    assert result.records == {"succeeded": 1500}
    assert result.exits == [0, 0, 0]  # each stopped cleanly on SIGTERM
    info = nats_side.info()
    assert (info.num_pending, info.num_ack_pending) == (0, 0)
