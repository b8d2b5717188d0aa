"""The state primitives on Django models and Django's connection, on SQLite, PostgreSQL and
MariaDB (tests/state/models_scenarios.py, in a child process per database): the answers as
for a Table, field names and primary keys as filters, the changes joining the caller's
``transaction.atomic()`` with the record, the outbox row and the steps (an inner block's
rollback removing only its own), and races of threads and of two processes on one row."""

from __future__ import annotations

from typing import Any

import pytest

from tests.db.django_project import FAMILIES, run_scenarios


@pytest.fixture(scope="module", params=FAMILIES)
def found(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp_path = tmp_path_factory.mktemp(request.param)
    return run_scenarios("tests.state.models_scenarios", request.param, tmp_path)


def test_the_answers_are_the_tables_and_rows_read_as_django_reads_them(found: Any) -> None:
    done = found["answers"]
    assert done["inserted"] == "Inserted"
    # Keyed by the fields' attnames: the ForeignKey as customer_id, db_column'd note as note.
    assert done["row"] == sorted(
        ["id", "customer_id", "number", "status", "stock", "version", "note", "made"]
    )
    assert done["aware"] is True  # through Django's converters (USE_TZ)
    assert done["existing"] == ["Existing", "first", True]
    assert done["advance"] == [
        "Applied",
        "AlreadyThere",
        "Illegal(current=Status.PAID, direction=<Direction.BEHIND: 'behind'>)",  # the member
        "Missing",
    ]
    assert done["decrement"] == ["Applied", "Insufficient(current=2)", "Missing"]
    assert done["versioned"] == ["Applied(version=1)", "Conflict(current_version=1)"]
    assert done["stored"] == ["PAID", 2, 1, "v"]


def test_bad_calls_are_refused_with_what_to_do(found: Any) -> None:
    nothing, many, sqlalchemy, twin, not_unique = found["answers"]["refused"]
    assert "has no field 'nothing'" in nothing
    assert "does not pick one row" in many
    assert "pass a Django connection or its alias" in sqlalchemy
    assert "sync_to_async" in twin
    assert "is not a unique key" in not_unique


def test_an_atomic_rollback_removes_the_state_change_with_record_and_message(found: Any) -> None:
    done = found["rolled_back"]
    assert done["raised"] == {"record": 0, "outbox": 0, "status": "NEW", "stock": 5}
    assert done["committed"] == {"record": 1, "outbox": 1, "status": "PAID", "stock": 3}


def test_a_rolled_back_inner_atomic_block_removes_only_its_own(found: Any) -> None:
    done = found["inner_rolled_back"]
    assert done["outer"] == {"status": "PAID", "stock": 1}  # 5 - 4; the inner block's 1 undone
    assert done["inner"] == {"record": 0, "outbox": 0, "status": "NEW", "stock": 5}


def test_a_step_and_its_state_change_roll_back_together(found: Any) -> None:
    done = found["steps"]
    assert done["kept"] == {"steps": 1, "status": "PAID", "stock": 5}
    assert done["undone"] == {"steps": 0, "status": "NEW", "stock": 5}


@pytest.mark.parametrize("racers", ["threads", "processes"])
def test_racers_on_one_row_get_exactly_what_is_allowed(found: Any, racers: str) -> None:
    done = found[racers]
    assert done["advance"] == {"Applied": 1, "AlreadyThere": 7}
    assert done["decrement"] == {"Applied": 5, "Insufficient": 3}
    assert (done["status"], done["stock"]) == ("PAID", 0)
