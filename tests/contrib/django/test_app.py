"""The app: the MIDENG setting checked at start-up, the project's Guard made once from it,
and the migrations that make mideng's tables on PostgreSQL, MariaDB and SQLite (a mideng
store then finds its schema current) and take them away (``migrate mideng zero``).
Every project runs in a child process (tests/contrib/django/project.py)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from mideng import Guard, open_store
from mideng.errors import SchemaVersionError
from mideng.schema import CURRENT
from tests.contrib.django.project import Project, django_database, fresh_database

MIGRATIONS = Path(__file__).parents[3] / "src" / "mideng" / "contrib" / "django" / "migrations"


def test_every_schema_version_has_its_django_migration() -> None:
    """One file per version of mideng.schema.migrations, in order, each applying its own."""
    files = sorted(p for p in MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))
    assert [int(p.name[:4]) for p in files] == list(range(1, CURRENT + 1))
    for number, path in enumerate(files, start=1):
        text = path.read_text()
        assert f"operation({number})" in text, path.name
        assert f"atomic({number})" in text, path.name
        if number > 1:
            assert f'("mideng", "{files[number - 2].stem}")' in text, path.name


def _sqlite(tmp_path: Path, **mideng: object) -> Project:
    return Project(tmp_path, django_database(f"sqlite:///{tmp_path / 'p.db'}"), dict(mideng))


@pytest.mark.parametrize(
    ("mideng", "said"),
    [
        ({"stroe": "memory://"}, "settings.MIDENG has an unknown key 'stroe'"),
        ({"database": 1}, "settings.MIDENG['database'] must be str, not int"),
        ({"lease": "60"}, "settings.MIDENG['lease'] must be int or float, not str"),
        ({"lease": True}, "settings.MIDENG['lease'] must be int or float, not bool"),
        ({"lease": -1}, "settings.MIDENG['lease'] must be a positive number of seconds"),
        ({"scopes": {"charge": {"on_expiry": "never"}}}, "settings.MIDENG['scopes']['charge']"),
        ({"scopes": {"charge": {"colour": 1}}}, "unknown option(s) ['colour']"),
        ({"scopes": ["charge"]}, "settings.MIDENG['scopes'] must be dict, not list"),
        ("memory://", "settings.MIDENG must be a dict, not str"),
    ],
)
def test_a_wrong_key_or_type_is_one_error_naming_it(mideng: object, said: str) -> None:
    # The parsing alone, in this process: it reads no settings (the child below proves the
    # app runs it at start-up).
    from django.core.exceptions import ImproperlyConfigured

    from mideng.contrib.django.settings import parse

    with pytest.raises(ImproperlyConfigured) as raised:
        parse(mideng)
    assert said in str(raised.value)


def test_a_wrong_setting_stops_the_start(tmp_path: Path) -> None:
    done = _sqlite(tmp_path, stroe="memory://").manage("check")
    assert done.returncode == 1
    assert "ImproperlyConfigured" in done.stderr
    assert "settings.MIDENG has an unknown key 'stroe'" in done.stderr


def test_the_defaults_and_the_scopes_with_external_effects() -> None:
    from mideng.contrib.django.settings import Config, parse

    assert parse(None) == Config()
    assert parse({"scopes": {"charge": {"on_expiry": "unknown"}}}).external_scopes == ["charge"]


@pytest.mark.parametrize(
    ("entry", "url"),
    [
        (
            {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": "shop",
                "USER": "app",
                "PASSWORD": "p@ss/w:rd",
                "HOST": "db",
                "PORT": "5433",
            },
            "postgresql://app:p%40ss%2Fw%3Ard@db:5433/shop",
        ),
        (
            {
                "ENGINE": "django.db.backends.mysql",
                "NAME": "shop",
                "USER": "root",
                "HOST": "127.0.0.1",
                "PORT": 3306,
            },
            "mysql://root@127.0.0.1:3306/shop",
        ),
        ({"ENGINE": "django.db.backends.postgresql", "NAME": "shop"}, "postgresql:///shop"),
        (
            {"ENGINE": "django.db.backends.sqlite3", "NAME": Path("/srv/db.sqlite3")},
            "sqlite:////srv/db.sqlite3",
        ),
    ],
)
def test_the_store_url_is_built_from_the_databases_entry(
    entry: dict[str, object], url: str
) -> None:
    from mideng.contrib.django.settings import url_of

    assert url_of("default", entry) == url


def test_an_engine_without_a_store_asks_for_one() -> None:
    from django.core.exceptions import ImproperlyConfigured

    from mideng.contrib.django.settings import url_of

    with pytest.raises(ImproperlyConfigured, match=r"set settings.MIDENG\['store'\]"):
        url_of("default", {"ENGINE": "django.db.backends.oracle"})


GUARD_SCRIPT = """
import json, threading
from mideng.contrib.django import guard
from mideng.http.django import options_from_settings
made = []
start = threading.Barrier(16)
def one():
    start.wait()
    made.append(id(guard()))
threads = [threading.Thread(target=one) for _ in range(16)]
for t in threads: t.start()
for t in threads: t.join()
g = guard()
print(json.dumps({
    "one": len(set(made)) == 1 and made[0] == id(g),
    "charge": g.policy("charge").on_expiry.value,
    "lease": g.policy("orders").lease,
    "ran": g.run("orders", "k1", lambda: "first"),
    "again": g.run("orders", "k1", lambda: "second"),
    "http": options_from_settings().guard is g,
    "store": type(g.store).__name__,
}))
"""


def test_the_guard_is_built_once_from_the_setting_and_shared(tmp_path: Path) -> None:
    project = _sqlite(
        tmp_path,
        records=f"rec_{uuid.uuid4().hex[:8]}",
        lease=12,
        scopes={"charge": {"on_expiry": "unknown"}},
    )
    project.more["MIDENG_HTTP"] = {"guard": "mideng.contrib.django.guard"}
    assert project.manage("migrate", "mideng").returncode == 0
    done = project.manage("shell", "-c", GUARD_SCRIPT)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {
        "one": True,
        "charge": "unknown",
        "lease": 12,
        "ran": "first",
        "again": "first",
        "http": True,
        "store": "SQLiteStore",
    }


def _store_call(url: str, records: str) -> str:
    """A guarded call on a store that never creates or upgrades its tables (as the app's on
    a server; SQLite's store has no create_schema: it makes what is absent)."""
    never: dict[str, Any] = {"auto_upgrade": False}
    if not url.startswith("sqlite"):
        never["create_schema"] = False
    guard = Guard(open_store(url, table=records, **never))
    try:
        return guard.run("orders", "k", lambda: "ran")
    finally:
        guard.close()


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


@pytest.mark.parametrize("family", ["sqlite", "postgresql", "mysql"])
def test_migrate_makes_the_tables_a_store_finds_current_and_zero_removes_them(
    tmp_path: Path, family: str
) -> None:
    suffix = uuid.uuid4().hex[:8]
    records, outbox = f"rec_{suffix}", f"box_{suffix}"
    mine = {records, f"{records}_steps", outbox, f"{outbox}_keys"}
    with fresh_database(family, tmp_path) as url:
        project = Project(tmp_path, django_database(url), {"records": records, "outbox": outbox})
        if family != "sqlite":  # a store that never creates tables refuses them absent...
            with pytest.raises(SchemaVersionError, match="does not exist"):
                _store_call(url, records)
        done = project.manage("migrate", "mideng")
        assert done.returncode == 0, done.stderr
        assert re.findall(r"Applying (mideng\.\w+)\.", done.stdout) == [
            f"mideng.{p.stem}" for p in sorted(MIGRATIONS.glob("[0-9]*.py"))
        ]
        assert mine <= _tables(url)
        # ... and, never upgrading, refuses them older than its version: these are current.
        assert _store_call(url, records) == "ran"
        changes = project.manage("makemigrations", "mideng", "--check", "--dry-run")
        assert changes.returncode == 0, changes.stdout + changes.stderr
        undone = project.manage("migrate", "mideng", "zero")
        assert undone.returncode == 0, undone.stderr
        assert not mine & _tables(url)
