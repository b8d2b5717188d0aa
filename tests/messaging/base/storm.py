"""Storms and crashes, with consumer processes (tests/helpers/storm_worker.py) and real
SIGKILLs; tests/helpers/storm.py runs them and says what each must show.

The storm: 2,000 messages over 1,500 business keys (the rest re-published as new broker
messages), three transactional consumer processes sharing the broker's queue, stream,
durable or group, one of them SIGKILLed at random points five times and restarted. At the
end every key has exactly one committed effect, every record succeeded, every worker stopped
cleanly on SIGTERM, and the broker holds nothing unsettled.

The crash points of a transactional consumer, each shown with a real SIGKILL there. Before
the commit, the redelivery runs the message again, once; after the commit and before the
ack, the redelivery is acked without running."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from tests.helpers.storm import check_crash, check_storm, crash_case, run_storm, tables
from tests.messaging.base.broker import Broker
from tests.services import MYSQL_URL, POSTGRES_URL, need

#: A storm's database by its id: the service it needs and its URL.
DATABASES = {"postgresql": ("postgresql", POSTGRES_URL), "mariadb": ("mysql", MYSQL_URL)}


class StormCases:
    #: The databases a storm runs on (each takes tens of seconds).
    storm_databases: ClassVar[Sequence[str]] = ("postgresql",)
    #: The pause between the storm's kills, and how long it may take.
    between_kills: ClassVar[tuple[float, float]] = (0.3, 1.5)
    storm_timeout: ClassVar[float] = 120.0

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "storm_database" in metafunc.fixturenames:
            metafunc.parametrize("storm_database", self.storm_databases)

    @pytest.mark.slow
    def test_storm_one_effect_per_key_with_kills(
        self, broker: Broker, tmp_path: Path, storm_database: str
    ) -> None:
        service, url = DATABASES[storm_database]
        need(service)
        with tables(url) as db:
            result = run_storm(
                broker, db, tmp_path, between_kills=self.between_kills, timeout=self.storm_timeout
            )
        check_storm(result)
        assert broker.settled(), broker.state()

    @pytest.mark.slow
    @pytest.mark.parametrize("at", ["before_commit", "after_commit"])
    def test_killed_at_a_crash_point(self, broker: Broker, tmp_path: Path, at: str) -> None:
        need("postgresql")
        with tables(POSTGRES_URL) as db:
            check_crash(crash_case(broker, db, tmp_path, at))
