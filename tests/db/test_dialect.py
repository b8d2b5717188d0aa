"""``lock_timed_out``: a lock wait that gave up, told apart from the driver's other errors.
The real lock waits that give up, on SQLite, PostgreSQL and MariaDB, are in
tests/messaging/celery/test_task_in_tx.py (a copy meeting an open transaction); here, the
errors that are not one."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from mideng.db import lock_timed_out, retryable
from tests.services import sql_url


@pytest.mark.parametrize("name", ["sqlite", "postgresql", "mysql"])
def test_other_errors_are_not_lock_waits(name: str, tmp_path: Path) -> None:
    engine = create_engine(sql_url(name, tmp_path / "x.db"))
    try:
        with pytest.raises(DBAPIError) as caught, engine.connect() as conn:
            conn.execute(text("SELECT * FROM mideng_no_such_table"))
    finally:
        engine.dispose()
    orig = caught.value.orig  # the driver's own error, as lock_timed_out reads it
    assert orig is not None
    assert not lock_timed_out(orig)


class _Error(Exception):
    def __init__(self, *args: object, sqlstate: str | None = None) -> None:
        super().__init__(*args)
        self.sqlstate = sqlstate


def test_a_deadlock_is_retryable_not_a_lock_wait() -> None:
    # A deadlock victim is rolled back and may run again at once; a lock wait that gave up
    # means the holder is still at work.
    for deadlock in (_Error(sqlstate="40P01"), _Error(1213, "Deadlock found")):
        assert retryable(deadlock)
        assert not lock_timed_out(deadlock)
    for waited in (_Error(sqlstate="55P03"), _Error(1205, "Lock wait timeout exceeded")):
        assert lock_timed_out(waited)
        assert not retryable(waited)
