"""``mideng migrate``'s command line: which tables it takes when none are named, and one line
with exit 2 for what it was asked, exit 1 for what it found (docs/schema.md)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import create_engine, inspect, text

from mideng.cli import main
from mideng.schema import CURRENT, records
from mideng.schema.lock import name, number
from tests.brokers import spare_port
from tests.services import sql_url


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, ["migrate", *args])


def one_error(done: Result, code: int) -> str:
    assert done.exit_code == code, (done.output, done.exception)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    assert "Traceback" not in done.output
    errors = [line for line in done.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, done.output
    return errors[0]


def test_without_tables_named_it_takes_what_the_database_has(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'found.db'}"
    first = cli("--db", url)  # nothing there: the default record table
    assert first.exit_code == 0, first.output
    assert first.output.startswith("record table mideng_records: absent, to version")
    assert cli("--db", url, "--outbox", "orders_outbox", "--to", "1").exit_code == 0
    found = cli("--db", url, "--plan")
    assert found.exit_code == 0, found.output
    assert "-- outbox orders_outbox: at version 1, to version" in found.output
    assert f"-- record table mideng_records: at version {CURRENT}, nothing to do" in found.output
    engine = create_engine(url)
    with engine.begin() as conn:  # dropped by hand: its rows are left, its tables are not
        conn.exec_driver_sql("DROP TABLE orders_outbox")
        conn.exec_driver_sql("DROP TABLE orders_outbox_keys")
    engine.dispose()
    again = cli("--db", url)
    assert again.exit_code == 0, again.output
    assert "orders_outbox" not in again.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--to", "0"), "Invalid value for '--to'"),
        (("--to", "99"), "no schema version 99"),
        (("--table", "orders; drop"), "plain SQL identifier"),
        (("--wait", "-1"), "Invalid value for '--wait'"),
    ],
)
def test_what_it_cannot_be_asked_is_a_usage_error(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    done = cli("--db", f"sqlite:///{tmp_path / 'u.db'}", *args)
    assert done.exit_code == 2, done.output
    assert says in done.output
    assert "Traceback" not in done.output


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres@127.0.0.1:port/test",
        "oracle://scott@db/orders",
        "redis://127.0.0.1:6379/0",
    ],
)
def test_a_url_it_cannot_use_is_a_usage_error(url: str) -> None:
    assert one_error(cli("--db", url), 2)


def test_going_back_is_a_usage_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'back.db'}"
    assert cli("--db", url).exit_code == 0
    line = one_error(cli("--db", url, "--to", "1"), 2)
    assert "migrations only go forward" in line


def test_a_database_it_cannot_reach_is_one_line_and_exit_1() -> None:
    line = one_error(cli("--db", f"postgresql://postgres@127.0.0.1:{spare_port()}/test"), 1)
    assert "the database failed" in line


@pytest.mark.parametrize("family", ["postgresql", "mysql"])
def test_a_lock_held_past_the_wait_is_one_line_and_exit_1(family: str, tmp_path: Path) -> None:
    """Another migration of the set holds its lock (here: this test, on the lock itself) for
    longer than ``--wait``: the command says so and changes nothing."""
    url = sql_url(family, tmp_path / "unused.db")
    table = f"rec_{uuid.uuid4().hex[:10]}"
    engine = create_engine(url)
    take, let_go, lock = (
        ("SELECT pg_advisory_lock(:lock)", "SELECT pg_advisory_unlock(:lock)", number)
        if family == "postgresql"
        else ("SELECT GET_LOCK(:lock, 0)", "SELECT RELEASE_LOCK(:lock)", name)
    )
    try:
        with engine.connect() as holder:
            held = {"lock": lock(records(table))}
            holder.execute(text(take), held)
            done = cli("--db", url, "--table", table, "--wait", "0.5")
            holder.execute(text(let_go), held)
        assert "waiting for another migration of the record table" in done.output
        assert "held its lock for 0.5 s" in one_error(done, 1)
        assert not inspect(engine).has_table(table)
    finally:
        engine.dispose()
