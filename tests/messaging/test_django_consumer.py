"""The transactional consumer on Django's connection (``engine="default"``), with Redis Streams
and SQLite, PostgreSQL and MariaDB (tests/messaging/django_consumer_scenarios.py, in a child
process per database): the handler's ORM row, state change and outbox row commit with the
dedup record in one atomic block; a handler that raises rolls all of them back and the retry
runs once more; copies delivered twice have one effect."""

from __future__ import annotations

from typing import Any

import pytest

from tests.db.django_project import FAMILIES, run_scenarios
from tests.services import need


@pytest.fixture(scope="module", params=FAMILIES)
def found(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    need("redis")
    tmp_path = tmp_path_factory.mktemp(request.param)
    return run_scenarios("tests.messaging.django_consumer_scenarios", request.param, tmp_path)


def test_each_message_has_one_effect_and_a_failed_run_leaves_none(found: Any) -> None:
    done = found["consumed"]
    assert done["runs"] == {"order:1": 1, "order:2": 1, "order:bad": 2}
    assert done["moves"] == ["order:1", "order:2", "order:bad"]
    assert done["taken"] == 3  # not 4: the failed run's unit came back with its rollback
    assert done["outbox"] == 3
    assert done["records"] == 3


def test_copies_taken_by_two_processes_at_once_have_one_effect(found: Any) -> None:
    done = found["raced"]
    keys = [f"race:{i}" for i in range(10)]
    assert done["members"] == 2
    assert done["runs"] == dict.fromkeys(keys, 1)  # across both processes
    assert done["moves"] == sorted(keys)
    assert (done["taken"], done["outbox"], done["records"]) == (10, 10, 10)


def test_the_handler_gets_its_threads_django_connection_inside_the_block(found: Any) -> None:
    assert found["consumed"]["handed"] is True


def test_a_message_is_not_run_inside_a_transaction_it_cannot_commit(found: Any) -> None:
    assert found["inside_atomic"] == {"verdict": "Retry", "runs": 0}


def test_a_consumer_that_could_not_run_is_refused(found: Any) -> None:
    done = found["refused"]
    assert "is not a database alias" in done["alias"]
    assert "runs a def handler(message, conn)" in done["coroutine"]
