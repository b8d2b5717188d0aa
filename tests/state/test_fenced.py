"""update_fenced on SQLite, PostgreSQL and MariaDB, sync and async, in the caller's
transaction and in autocommit use: the row takes a write from the claim whose fence is the
newest it has seen, and refuses an older claim's late write (a holder that was taken over)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table

from mideng.errors import ConfigurationError
from mideng.state import Applied, Missing, Superseded
from tests.state.sides import Db, Side, using


@pytest.fixture
def slots(db: Db) -> Iterator[Table]:
    metadata = MetaData()
    table = Table(
        f"fenced_{uuid.uuid4().hex[:10]}",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("slot", String(40), nullable=False, unique=True),
        Column("runs", Integer, nullable=False, default=0),
        Column("fence", Integer, nullable=True),
    )
    metadata.create_all(db.engine)
    yield table
    metadata.drop_all(db.engine)


def _seed(db: Db, table: Table, slot: str) -> None:
    with db.engine.begin() as conn:
        conn.execute(table.insert().values(slot=slot, runs=0))


def test_a_newer_fence_wins_and_an_older_one_is_refused(
    db: Db, side: Side, mode: str, slots: Table
) -> None:
    slot = "2026-12-07T20:00:00Z"
    _seed(db, slots, slot)
    where = {"slot": slot}
    with using(side, mode) as conn:
        with side.counted() as sent:
            assert side.update_fenced(conn, slots, where, {"runs": 1}, fence=1) == Applied()
        assert len(sent) == 1  # the happy path is one statement
        # The same holder writes again: its own fence is not older than the row's.
        assert side.update_fenced(conn, slots, where, {"runs": 1}, fence=1) == Applied()
        assert side.update_fenced(conn, slots, where, {"runs": 2}, fence=3) == Applied()
        with side.counted() as sent:
            late = side.update_fenced(conn, slots, where, {"runs": 99}, fence=2)
        assert late == Superseded(3)
        assert not late.ok
        assert len(sent) == 2  # the miss, then the read that says why
        missing = side.update_fenced(conn, slots, {"slot": "nowhere"}, {"runs": 1}, fence=9)
        assert missing == Missing()
    [row] = db.rows(slots, slot=slot)
    assert (row["runs"], row["fence"]) == (2, 3)


def test_bad_arguments_are_refused_before_any_statement(db: Db, side: Side, slots: Table) -> None:
    conn = side.connect()
    with side.counted() as sent:
        for fence in (0, -1, True, "1", None, 1.5):
            with pytest.raises(ConfigurationError, match="the claim's fence"):
                side.update_fenced(conn, slots, {"slot": "a"}, {"runs": 1}, fence=fence)
        with pytest.raises(ConfigurationError, match="fence column"):
            side.update_fenced(conn, slots, {"slot": "a"}, {"fence": 5}, fence=1)
        with pytest.raises(ConfigurationError, match="no fence column 'epoch'"):
            side.update_fenced(conn, slots, {"slot": "a"}, {"runs": 1}, fence=1, column="epoch")
        with pytest.raises(ConfigurationError, match="no columns"):
            side.update_fenced(conn, slots, {"slot": "a"}, {}, fence=1)
    assert sent == []
    side.release(conn)
