"""RabbitMQ: the storm with kills on PostgreSQL, and both crash cases with real kills."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.brokers import BrokerNames
from tests.messaging.storm import DATABASES, RabbitSide, Tables
from tests.messaging.storms import crash, storm
from tests.services import need

pytestmark = pytest.mark.slow


@pytest.fixture
def pg() -> Iterator[Tables]:
    need("postgresql")
    db = Tables(DATABASES["postgresql"])
    db.create()
    yield db
    db.drop()


def test_storm_with_kills_on_postgresql(
    broker_names: BrokerNames, pg: Tables, tmp_path: Path
) -> None:
    storm(RabbitSide(broker_names), pg, tmp_path)


def test_a_kill_before_the_commit_runs_it_again(
    broker_names: BrokerNames, pg: Tables, tmp_path: Path
) -> None:
    runs = crash(RabbitSide(broker_names), pg, tmp_path, "before_commit")
    assert runs["order:crash"] == 2  # the rolled-back run and the redelivery's


def test_a_kill_after_the_commit_acks_the_redelivery_without_running(
    broker_names: BrokerNames, pg: Tables, tmp_path: Path
) -> None:
    runs = crash(RabbitSide(broker_names), pg, tmp_path, "after_commit")
    assert runs["order:crash"] == 1
