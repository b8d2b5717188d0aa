"""``mideng schema``: the steps table of multi-step operations printed with the record table
(it is part of its schema; ``--steps`` is still taken) and, with ``--apply``, created up front,
so a service account that may not create tables still runs operations."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, inspect, text

from mideng import Guard, open_store
from mideng.cli.schema import schema
from tests.services import MYSQL_URL, POSTGRES_URL, need


def test_the_steps_table_is_printed_with_the_record_table(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/plain.db"
    plain = CliRunner().invoke(schema, ["--url", url, "--table", "records"])
    assert plain.exit_code == 0, plain.output
    assert "CREATE TABLE IF NOT EXISTS records_steps" in plain.output
    both = CliRunner().invoke(schema, ["--url", url, "--table", "records", "--steps"])
    assert both.exit_code == 0, both.output
    assert both.output == plain.output


def test_apply_creates_the_steps_table_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "ops.db"
    done = CliRunner().invoke(schema, ["--url", f"sqlite:///{path}", "--steps", "--apply"])
    assert done.exit_code == 0, done.output
    engine = create_engine(f"sqlite:///{path}")
    try:
        assert "mideng_records_steps" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
def test_apply_creates_the_steps_table_on_a_server(kind: str) -> None:
    need(kind)
    url = POSTGRES_URL if kind == "postgresql" else MYSQL_URL
    table = f"mideng_schema_{uuid.uuid4().hex[:10]}"
    engine = create_engine(url)
    try:
        printed = CliRunner().invoke(schema, ["--url", url, "--table", table, "--steps"])
        assert printed.exit_code == 0, printed.output
        assert f"CREATE TABLE IF NOT EXISTS {table}_steps" in printed.output
        assert table not in inspect(engine).get_table_names()  # printed, not applied
        args = ["--url", url, "--table", table, "--steps", "--apply"]
        done = CliRunner().invoke(schema, args)
        assert done.exit_code == 0, done.output
        assert {table, f"{table}_steps"} <= set(inspect(engine).get_table_names())
        guard = Guard(open_store(url, table=table))
        try:

            @guard.operation("pay", key=lambda order: order)
            def pay(order: str) -> str:
                return charge(order)

            @guard.step("charge")
            def charge(order: str) -> str:
                return f"charged {order}"

            assert pay("o-1") == "charged o-1"  # the steps table serves the operation
        finally:
            guard.close()
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"DROP TABLE IF EXISTS {table}_steps"))
            conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
        engine.dispose()
