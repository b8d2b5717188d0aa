"""Django migrations from the same list: an app whose migrations are a few lines each
(``mideng.schema.django.operation``), migrated by Django's own ``migrate`` in a project of its
own on SQLite, PostgreSQL and MariaDB, gives mideng's tables at the version a store expects;
migrated back to zero, they are gone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import inspect

from mideng import open_store
from mideng.schema import CURRENT, MIGRATIONS
from mideng.schema.django import atomic, statements
from tests.schema.conftest import Db

SETTINGS = """
import os

SECRET_KEY = "tests-only"
USE_TZ = True
INSTALLED_APPS = [os.environ["SHOP_APP"]]
URL = os.environ["SHOP_DB"]
if URL.startswith("sqlite"):
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                             "NAME": URL.removeprefix("sqlite:///")}}
elif URL.startswith("postgresql"):
    DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "test",
                             "USER": "postgres", "HOST": "127.0.0.1", "PORT": "5432"}}
else:
    import pymysql

    pymysql.install_as_MySQLdb()
    DATABASES = {"default": {"ENGINE": "django.db.backends.mysql", "NAME": "test",
                             "USER": "root", "HOST": "127.0.0.1", "PORT": "3306"}}
"""

MIGRATION = """
import os

from django.db import migrations

from mideng.schema import django as mideng_schema

TABLES = {{"tables": [os.environ["SHOP_RECORDS"]], "outboxes": [os.environ["SHOP_OUTBOX"]]}}


class Migration(migrations.Migration):
    atomic = mideng_schema.atomic({version})
    dependencies = {dependencies}
    operations = [mideng_schema.operation({version}, **TABLES)]
"""


def _project(db: Db, tmp_path: Path) -> tuple[str, dict[str, str]]:
    app = f"shop_{db.records.removeprefix('rec_')}"
    migrations = tmp_path / app / "migrations"
    migrations.mkdir(parents=True)
    (tmp_path / app / "__init__.py").write_text("")
    (migrations / "__init__.py").write_text("")
    (tmp_path / "shop_settings.py").write_text(textwrap.dedent(SETTINGS))
    for step in MIGRATIONS:
        before = [] if step.version == 1 else [(app, f"{step.version - 1:04d}_mideng")]
        text = MIGRATION.format(version=step.version, dependencies=before)
        (migrations / f"{step.version:04d}_mideng.py").write_text(textwrap.dedent(text))
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]),
        DJANGO_SETTINGS_MODULE="shop_settings",
        SHOP_APP=app,
        SHOP_DB=db.url,
        SHOP_RECORDS=db.records,
        SHOP_OUTBOX=db.outbox,
    )
    return app, env


def _django(env: dict[str, str], *args: str) -> None:
    command = [sys.executable, "-m", "django", *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_django_migrates_mideng_tables_up_and_back(db: Db, tmp_path: Path) -> None:
    app, env = _project(db, tmp_path)
    try:
        _django(env, "migrate", app)
        assert db.versions("records") == list(range(1, CURRENT + 1))
        assert db.versions("outbox") == list(range(1, CURRENT + 1))
        store = open_store(db.url, table=db.records, auto_upgrade=False)  # nothing to refuse
        store.close()
        _django(env, "migrate", app, "zero")
        assert db.versions("records") == []
        assert db.versions("outbox") == []
        db.engine.dispose()  # its connections saw the tables
        tables = inspect(db.engine).get_table_names()
        assert not {db.records, f"{db.records}_steps", db.outbox, f"{db.outbox}_keys"} & set(tables)
    finally:
        db.run("DELETE FROM django_migrations WHERE app = :app", {"app": app})


@pytest.mark.parametrize("vendor", ["postgresql", "mysql", "sqlite"])
def test_each_version_is_sql_for_each_vendor(vendor: str) -> None:
    for step in MIGRATIONS:
        sql = statements(step.version, vendor)
        assert sql[0].startswith("CREATE TABLE IF NOT EXISTS mideng_schema")
        assert any(f"'mideng_records', {step.version}," in s for s in sql)
        assert any(f"'mideng_outbox', {step.version}," in s for s in sql)
    # PostgreSQL builds indexes concurrently, outside a transaction: such a migration is not
    # atomic in Django; each one so far builds an index.
    assert [atomic(step.version) for step in MIGRATIONS] == [False] * len(MIGRATIONS)
