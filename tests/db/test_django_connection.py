"""mideng on a Django connection, on SQLite, PostgreSQL and MariaDB: the transactional block,
the outbox row and a step join the caller's ``transaction.atomic()``, commit with it, roll back
with it (an inner block alone when only it is rolled back), replay a duplicate, run a body
once under concurrent duplicates, and refuse a claim of a scope with external effects.

Django's settings are process-wide and the HTTP tests configure their own, so the scenarios
(tests/db/django_scenarios.py) run in a child process per database, which reports what each
found as JSON."""

from __future__ import annotations

from typing import Any

import pytest

from tests.db.django_project import FAMILIES, run_scenarios


@pytest.fixture(scope="module", params=FAMILIES)
def found(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp_path = tmp_path_factory.mktemp(request.param)
    return run_scenarios("tests.db.django_scenarios", request.param, tmp_path)


ALL = {"record": 1, "order": 1, "outbox": 1}
NONE = {"record": 0, "order": 0, "outbox": 0}


def test_the_statement_kind_comes_from_the_vendor(found: Any) -> None:
    assert found["kind"] in ("sqlite", "postgresql", "mariadb")


def test_a_committed_block_keeps_record_order_and_message_and_its_duplicate_replays(
    found: Any,
) -> None:
    done = found["committed"]
    assert done == {
        "first": {"replayed": False},
        "again": {"replayed": True, "result": {"order": "k-commit"}},
        **ALL,
    }


def test_an_exception_in_the_atomic_block_removes_all_of_it(found: Any) -> None:
    assert found["raised"] == {"raised": NONE, "before": NONE}


def test_a_rolled_back_inner_atomic_block_removes_only_its_own(found: Any) -> None:
    done = found["inner_rolled_back"]
    assert done == {"outer": 1, "inner": NONE, "kept": {"record": 1, "order": 0, "outbox": 1}}


def test_a_failed_block_without_a_savepoint_dooms_the_callers_block(found: Any) -> None:
    done = found["without_savepoint"]
    assert done == {"doomed": True, "before": NONE, "block": NONE}


def test_a_transaction_managed_by_hand_is_the_callers(found: Any) -> None:
    done = found["by_hand"]
    if found["kind"] == "sqlite":
        assert "commits on SQLite" in done["inside"]
    else:
        assert done["inside"] == ALL
    assert done["after"] == NONE


def test_outside_atomic_the_block_commits_itself_and_the_outbox_refuses(found: Any) -> None:
    done = found["outside_atomic"]
    assert done["own"] == {"record": 1, "order": 1, "outbox": 0}
    assert done["autocommit"] is True  # the block it began is over
    assert "inside transaction.atomic()" in done["loose"]


def test_concurrent_duplicates_run_the_body_once(found: Any) -> None:
    done = found["concurrent"]
    assert done["runs"] == 1
    assert done["answers"] == ["first"] * 5
    assert (done["record"], done["order"]) == (1, 1)


def test_a_scope_with_external_effects_is_refused_inside_an_atomic_block(found: Any) -> None:
    done = found["refused"]
    assert "declares external effects" in done["inside"]
    assert "roll back with the block while the effect stays done" in done["inside"]
    assert done["outside"] == 1


def test_a_step_records_in_the_callers_atomic_block(found: Any) -> None:
    done = found["steps"]
    assert done["kept"] == {"steps": 1, "record": 0, "order": 1, "outbox": 0}
    assert done["undone"] == {"steps": 0, "record": 0, "order": 0, "outbox": 0}
    assert done["own"] == {"steps": 1, "record": 0, "order": 1, "outbox": 0}
