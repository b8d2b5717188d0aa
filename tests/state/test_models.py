"""The state primitives on Django models and Django's connection, on SQLite, PostgreSQL and
MariaDB (tests/state/models_scenarios.py, in a child process per database): the answers as
for a Table, field names and primary keys as filters, the changes joining the caller's
``transaction.atomic()`` with the record, the outbox row and the steps (an inner block's
rollback removing only its own), and races of threads and of two processes on one row."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
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
    nothing, many, sqlalchemy, twin, not_unique, bad = found["answers"]["refused"]
    assert "has no field 'nothing'" in nothing
    assert "does not pick one row" in many
    assert "pass a Django connection or its alias" in sqlalchemy
    assert "sync_to_async" in twin
    assert "is not a unique key" in not_unique
    assert "'not a number' is not a value of the field" in bad


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


def test_one_statement_on_the_happy_path_and_a_read_back_only_on_a_miss(found: Any) -> None:
    assert found["round_trips"] == {
        "advance": ["Applied", 1],
        "advance again": ["AlreadyThere", 2],
        "decrement": ["Applied", 1],
        "decrement short": ["Insufficient", 2],
        "insert": ["Inserted", 1],
        "insert again": ["Existing", 2],
    }


def test_a_proxy_is_its_concrete_models_table_and_unique_together_a_key(found: Any) -> None:
    done = found["kinds_of_models"]
    assert (done["proxy"], done["proxied"]) == ("Applied", "PAID")
    assert "Priced is an abstract model" in done["abstract"]
    assert done["together"] == "Insufficient"  # picked by (day, room); nothing to take


def test_rows_hold_python_values_and_a_plain_table_runs_on_djangos_connection(
    found: Any,
) -> None:
    done = found["kinds_of_models"]
    # A UUID stored as text on MySQL and SQLite, a datetime: read back as Django reads them.
    assert done["types"] == [["UUID", "datetime"], ["UUID", "datetime"]]
    assert done["table"] == "Insufficient(current=5)"


def test_mysql_8s_statements_on_a_django_connection(found: Any) -> None:
    done = found["mysql_statements"]
    if not done:
        pytest.skip("MySQL's statements are MySQL's and MariaDB's")
    assert done["kind"] == "mysql"
    assert done["made"] == [
        "Inserted",
        ["booked", "code", "day", "id", "room", "taken"],
        ["UUID", "datetime"],  # as Python had them, not as they were sent
    ]
    assert done["again"] == ["Existing", True]  # the duplicate's error left the block usable
    assert done["after"] == "Insufficient"


def test_a_string_without_a_django_project_is_refused_by_name() -> None:
    script = textwrap.dedent(
        """
        from sqlalchemy import Column, Integer, MetaData, Table
        from mideng.errors import ConfigurationError
        from mideng.state import decrement
        stock = Table("stock", MetaData(), Column("id", Integer, primary_key=True),
                      Column("qty", Integer))
        try:
            decrement("sqlite:///shop.db", stock, {"id": 1}, "qty", 1)
        except ConfigurationError as exc:
            print(exc)
        """
    )
    env = {name: value for name, value in os.environ.items() if name != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert "a string is taken for a Django database alias" in done.stdout
    assert "no configured Django project" in done.stdout
