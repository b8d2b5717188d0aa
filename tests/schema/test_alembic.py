"""A project whose schema goes through Alembic includes mideng's branch: ``alembic upgrade
heads`` creates mideng's tables beside its own (at the version a store expects), ``alembic
revision --autogenerate`` proposes nothing for them, and the branch goes down and up again."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import alembic
import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from mideng import open_store
from mideng.errors import SchemaVersionError
from mideng.schema import CURRENT, MIGRATIONS
from mideng.schema.alembic import BRANCH, revision
from tests.schema.conftest import Db

ENV = """
import os

from alembic import context
from sqlalchemy import Column, Integer, MetaData, String, Table, engine_from_config, pool

from mideng.schema.alembic import excluding, tables_of

config = context.config
metadata = MetaData()
Table(config.get_main_option("shop.orders"), metadata,
      Column("id", Integer, primary_key=True), Column("status", String(20)))
# The database is shared with other tests: only this project's tables are compared.
ours = {config.get_main_option("shop.orders"), "mideng_schema",
        *(name for tables in tables_of(config) for name in tables.tables)}


def only_ours(obj, name, type_, reflected, compare_to):
    table = name if type_ == "table" else getattr(getattr(obj, "table", None), "name", None)
    return table in ours


def named_ours(name, type_, parent_names):
    # Before reflection: another test's table, dropped while this one lists them, is never read.
    return type_ != "table" or name in ours


if os.environ.get("SHOP_WITHOUT_MIDENG_FILTER"):
    include = only_ours
else:
    include = excluding(tables_of(config), also=only_ours)

if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True,
                      version_table=config.get_main_option("shop.versions"))
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = engine_from_config(config.get_section(config.config_ini_section),
                                prefix="sqlalchemy.", poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata,
                          include_object=include, include_name=named_ours,
                          version_table=config.get_main_option("shop.versions"))
        with context.begin_transaction():
            context.run_migrations()
"""

OWN_REVISION = """
from alembic import op
import sqlalchemy as sa
from alembic import context

revision = "shop_0001"
down_revision = None
branch_labels = ("shop",)
depends_on = None


def upgrade():
    op.create_table(context.config.get_main_option("shop.orders"),
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("status", sa.String(20)))


def downgrade():
    op.drop_table(context.config.get_main_option("shop.orders"))
"""


def project(db: Db, tmp_path: Path) -> Config:
    """A project's Alembic setup: its own revision, and mideng's branch included."""
    root = tmp_path / "alembic"
    versions = root / "versions"
    versions.mkdir(parents=True)
    (root / "env.py").write_text(textwrap.dedent(ENV))
    template = Path(alembic.__file__).parent / "templates" / "generic" / "script.py.mako"
    (root / "script.py.mako").write_text(template.read_text())
    (versions / "shop_0001.py").write_text(textwrap.dedent(OWN_REVISION))
    ini = tmp_path / "alembic.ini"
    ini.write_text(
        textwrap.dedent(f"""
        [alembic]
        script_location = {root}
        path_separator = space
        version_locations = {versions} mideng.schema.alembic:versions
        sqlalchemy.url = {db.url}
        mideng.tables = {db.records}
        mideng.outboxes = {db.outbox}
        shop.orders = {db.records}_orders
        shop.versions = {db.records}_alembic
        """)
    )
    return Config(str(ini))


def _cleanup(db: Db) -> None:
    for table in (f"{db.records}_orders", f"{db.records}_alembic"):
        db.run(f"DROP TABLE IF EXISTS {table}")


def test_every_migration_is_a_revision_on_the_branch(tmp_path: Path) -> None:
    config = Config()
    config.set_main_option("script_location", str(tmp_path))
    config.set_main_option("path_separator", "space")
    config.set_main_option("version_locations", "mideng.schema.alembic:versions")
    scripts = ScriptDirectory.from_config(config)
    chain = list(reversed(list(scripts.iterate_revisions(f"{BRANCH}@head", "base"))))
    assert [script.revision for script in chain] == [revision(m.version) for m in MIGRATIONS]
    assert chain[0].branch_labels == {BRANCH}
    for script, step in zip(chain, MIGRATIONS, strict=True):
        source = Path(str(script.path)).read_text()
        assert f"alembic.upgrade({step.version})" in source
        assert f"alembic.downgrade({step.version})" in source


def _autogenerated(config: Config, monkeypatch: pytest.MonkeyPatch, filtered: bool) -> str:
    if filtered:
        monkeypatch.delenv("SHOP_WITHOUT_MIDENG_FILTER", raising=False)
    else:
        monkeypatch.setenv("SHOP_WITHOUT_MIDENG_FILTER", "1")
    made: Any = command.revision(config, message="check", autogenerate=True, head="shop@head")
    path = Path(made.path)
    body = path.read_text()
    path.unlink()
    return body.split("def upgrade()", 1)[1]


def test_upgrade_heads_creates_mideng_tables_and_autogenerate_leaves_them_alone(
    db: Db, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = project(db, tmp_path)
    try:
        command.upgrade(config, "heads")
        assert db.versions("records") == list(range(1, CURRENT + 1))
        assert db.versions("outbox") == list(range(1, CURRENT + 1))
        store = open_store(db.url, table=db.records)  # no upgrade to make, none refused
        store.close()

        mideng_tables = re.compile(rf"{db.records}(_steps)?\b|{db.outbox}|mideng_schema")
        # Without mideng's filter, autogenerate would drop the tables it does not describe.
        assert mideng_tables.search(_autogenerated(config, monkeypatch, filtered=False))
        proposed = _autogenerated(config, monkeypatch, filtered=True)
        assert not mideng_tables.search(proposed), proposed
    finally:
        _cleanup(db)


def test_the_branch_goes_down_and_up_again(db: Db, tmp_path: Path) -> None:
    config = project(db, tmp_path)
    try:
        command.upgrade(config, "heads")
        command.downgrade(config, f"{BRANCH}@-1")
        assert db.versions() == list(range(1, CURRENT))
        with pytest.raises(SchemaVersionError, match=f"schema version {CURRENT - 1}"):
            open_store(db.url, table=db.records, auto_upgrade=False)
        command.upgrade(config, "heads")
        assert db.versions() == list(range(1, CURRENT + 1))
        command.downgrade(config, f"{BRANCH}@base")
        assert db.versions() == []
        assert not db.run("SELECT 1 FROM mideng_schema WHERE name = :n", {"n": db.records})
    finally:
        _cleanup(db)


def test_offline_sql_holds_the_tables_and_their_version(
    db: Db, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = project(db, tmp_path)
    command.upgrade(config, f"{BRANCH}@head", sql=True)
    printed = capsys.readouterr().out
    assert f"CREATE TABLE IF NOT EXISTS {db.records} " in printed
    assert f"{db.records}_steps_begun" in printed
    assert f"'{db.outbox}', {CURRENT}" in printed
    assert db.versions() == []  # printed, not run
