"""The list of migrations: version 1 is exactly what mideng 0.1.0 made, version 2's index
serves what it is for, and a migration cut short anywhere is finished by running it again."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from mideng.cli import main
from mideng.schema import CURRENT, MIGRATIONS, outbox, records
from mideng.stores.record_table.steps import StepStatements
from tests.schema.conftest import OLD_OUTBOX, OLD_RECORDS, Db, old_ddl, open_db


def migrate(db: Db, *args: str) -> Any:
    argv = ["migrate", "--db", db.url, "--table", db.records, "--outbox", db.outbox, *args]
    done = CliRunner().invoke(main, argv)
    assert done.exit_code == 0, done.output
    return done


@pytest.mark.parametrize("family", ["sqlite", "postgresql", "mysql"])
def test_version_1_is_statement_for_statement_what_mideng_0_1_0_ran(family: str) -> None:
    """The DDL 0.1.0 printed and ran (kept in data/), unchanged: on a fresh database version 1
    runs the same statements, in the same order."""
    old = old_ddl(family)
    first = MIGRATIONS[0]
    new = [
        statement
        for tables in (records(OLD_RECORDS), outbox(OLD_OUTBOX))
        for change in first.changes(tables, family)
        for statement in change.statements(True)
    ]
    assert new == old


def shape(db: Db, records_table: str, outbox_table: str) -> list[str]:
    """The database's own description of a record set and an outbox, with their names
    replaced by placeholders: columns, types, defaults, keys, indexes, triggers."""
    names = [records_table, f"{records_table}_steps", outbox_table, f"{outbox_table}_keys"]
    with db.engine.connect() as conn:
        if db.family == "sqlite":
            rows = conn.execute(
                text(
                    "SELECT type, name, sql FROM sqlite_master WHERE tbl_name IN "
                    "(:a, :b, :c, :d) ORDER BY type, name"
                ),
                dict(zip("abcd", names, strict=True)),
            )
            # SQLite keeps each statement's text as sent; 0.1.0 sent its line breaks.
            described = [" ".join(" ".join(str(v) for v in row).split()) for row in rows]
        elif db.family == "postgresql":
            described = _postgresql_shape(conn, names)
        else:
            described = [conn.execute(text(f"SHOW CREATE TABLE {name}")).one()[1] for name in names]
    return sorted(
        line.replace(records_table, "RECORDS").replace(outbox_table, "OUTBOX") for line in described
    )


def _postgresql_shape(conn: Any, names: list[str]) -> list[str]:
    binds = {"a": names[0], "b": names[1], "c": names[2], "d": names[3]}
    columns = conn.execute(
        text(
            "SELECT table_name, ordinal_position, column_name, data_type, is_nullable, "
            "column_default FROM information_schema.columns WHERE table_schema = "
            "current_schema() AND table_name IN (:a, :b, :c, :d)"
        ),
        binds,
    )
    indexes = conn.execute(
        text("SELECT indexdef FROM pg_indexes WHERE tablename IN (:a, :b, :c, :d)"), binds
    )
    triggers = conn.execute(
        text(
            "SELECT pg_get_triggerdef(t.oid), p.prosrc FROM pg_trigger t JOIN pg_proc p "
            "ON p.oid = t.tgfoid WHERE NOT t.tgisinternal AND t.tgrelid = ANY(ARRAY["
            "to_regclass(:a), to_regclass(:b), to_regclass(:c), to_regclass(:d)])"
        ),
        binds,
    )
    return [" ".join(str(v) for v in row) for row in (*columns, *indexes, *triggers)]


def test_version_1_makes_the_tables_mideng_0_1_0_made(db: Db, tmp_path: Any) -> None:
    """Compared in the database's own words: ``mideng migrate --to 1`` beside 0.1.0's DDL."""
    migrate(db, "--to", "1")
    old = open_db(db.family, tmp_path)  # the same database, other names
    try:
        with db.engine.begin() as conn:
            for statement in old.old_statements():
                conn.exec_driver_sql(statement)
        assert shape(db, db.records, db.outbox) == shape(old, old.records, old.outbox)
    finally:
        old.drop()


def _explain(db: Db, statement: str = "listing_all") -> str:
    """How the database reads the operations' listing (``Guard.pending``, ``reconcile``; a
    dashboard's next page: ``listing_all_after``)."""
    kind = "mariadb" if db.family == "mysql" else db.family
    listing = getattr(StepStatements(kind, db.records), statement).text.replace(":limit", "10")
    for bind, value in ((":after_at", "1.5"), (":after_scope", "'s'"), (":after_key", "'k'")):
        listing = listing.replace(bind, value)
    # sqlite3 would explain again the statement it prepared before the index: new connections.
    db.engine.dispose()
    with db.engine.begin() as conn:
        if db.family == "postgresql":
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")  # as on a large table
            rows = conn.exec_driver_sql(f"EXPLAIN {listing}")
        elif db.family == "sqlite":
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {listing}")
        else:
            rows = conn.exec_driver_sql(f"EXPLAIN {listing}")
        return "\n".join(" ".join(str(v) for v in row) for row in rows)


def test_version_2_serves_the_operations_listing(db: Db) -> None:
    migrate(db, "--to", "1")
    index = f"{db.records}_steps_begun"
    assert index not in _explain(db)
    migrate(db)
    assert index in _explain(db)
    assert index in _explain(db, "listing_all_after")


def _index_by_hand(db: Db) -> None:
    """Version 2's index made as a migration cut short after making it would leave it."""
    (change,) = MIGRATIONS[1].changes(records(db.records), db.family)
    with db.engine.begin() as conn:
        for statement in change.statements(True):
            conn.exec_driver_sql(statement)


def test_a_migration_cut_short_is_finished_by_running_it_again(db: Db) -> None:
    migrate(db, "--to", "1")
    _index_by_hand(db)  # the index in, the version row not yet
    assert db.versions() == [1]
    done = migrate(db)
    assert f"applied {CURRENT}:" in done.output
    assert db.versions() == list(range(1, CURRENT + 1))


def test_a_concurrent_build_that_failed_is_dropped_and_built_again(tmp_path: Any) -> None:
    """A concurrent index build that fails or is cancelled leaves an invalid index under its
    name, which CREATE INDEX IF NOT EXISTS would take for a built one."""
    db = open_db("postgresql", tmp_path)
    try:
        migrate(db, "--to", "1")
        steps, index = f"{db.records}_steps", f"{db.records}_steps_begun"
        db.run(
            f"INSERT INTO {steps} (scope, key, step, codec, at) VALUES "
            "('s', 'a', '', 'json', 1), ('s', 'b', '', 'json', 2)"
        )
        with db.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            with pytest.raises(Exception, match="could not create unique index"):
                conn.exec_driver_sql(f"CREATE UNIQUE INDEX CONCURRENTLY {index} ON {steps} (codec)")
        valid = f"SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('{index}')"
        assert db.run(valid) == [(False,)]
        migrate(db)
        assert db.run(valid) == [(True,)]
        (definition,) = db.run(f"SELECT indexdef FROM pg_indexes WHERE indexname = '{index}'")
        assert definition[0].endswith("(at) WHERE (step = ''::text)")
    finally:
        db.drop()
