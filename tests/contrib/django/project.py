"""A Django project for the app's tests, written per test into a temporary folder and run in
child processes (``python -m django <command>``): Django's settings are process-wide, and the
HTTP tests configure their own in the test process.

``Project`` holds the settings' text; ``fresh_database`` gives each PostgreSQL or MariaDB test
a database of its own (django_migrations is per database, and other suites migrate at once).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tests.services import MYSQL_URL, POSTGRES_URL, need

ENGINES = {
    "sqlite": "django.db.backends.sqlite3",
    "postgresql": "django.db.backends.postgresql",
    "mysql": "django.db.backends.mysql",
}


def django_database(url: str) -> dict[str, Any]:
    """DATABASES' entry for a SQLAlchemy URL."""
    parsed = make_url(url)
    family = parsed.get_backend_name()
    if family == "sqlite":
        return {"ENGINE": ENGINES["sqlite"], "NAME": parsed.database}
    return {
        "ENGINE": ENGINES["postgresql" if family == "postgresql" else "mysql"],
        "NAME": parsed.database,
        "USER": parsed.username,
        "PASSWORD": parsed.password or "",
        "HOST": parsed.host,
        "PORT": str(parsed.port),
    }


@contextlib.contextmanager
def fresh_database(family: str, folder: Path) -> Iterator[str]:
    """A database of its own on ``family``'s server (a file for SQLite), dropped after: its
    SQLAlchemy URL."""
    if family == "sqlite":
        yield f"sqlite:///{folder / 'project.db'}"
        return
    need(family)
    server = make_url(POSTGRES_URL if family == "postgresql" else MYSQL_URL)
    name = f"djapp_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            force = " WITH (FORCE)" if family == "postgresql" else ""  # a pool left open
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}{force}")
        admin.dispose()


@dataclass
class Project:
    """One project's settings, written to ``folder``/project_settings.py when run."""

    folder: Path
    database: dict[str, Any]
    mideng: dict[str, Any] | None = None
    more: dict[str, Any] = field(default_factory=dict)
    apps: tuple[str, ...] = ("django.contrib.contenttypes", "django.contrib.auth")

    def settings(self) -> str:
        lines = [
            "import pymysql",
            "pymysql.install_as_MySQLdb()",
            'SECRET_KEY = "tests-only"',
            "USE_TZ = True",
            f"INSTALLED_APPS = {[*self.apps, 'mideng.contrib.django']!r}",
            f"DATABASES = {{'default': {self.database!r}}}",
        ]
        if self.mideng is not None:
            lines.append(f"MIDENG = {self.mideng!r}")
        lines += [f"{name} = {value!r}" for name, value in self.more.items()]
        return "\n".join(lines) + "\n"

    def env(self, **more: str) -> dict[str, str]:
        (self.folder / "project_settings.py").write_text(self.settings())
        return dict(
            os.environ,
            **more,
            PYTHONPATH=os.pathsep.join([str(self.folder), *sys.path]),
            DJANGO_SETTINGS_MODULE="project_settings",
        )

    def manage(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """``manage.py`` ``args`` (``env``: more environment variables), to its end."""
        command = [sys.executable, "-m", "django", *args]
        return subprocess.run(
            command,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        """``code`` run by ``python -c`` in the project (its settings, Django not set up)."""
        return subprocess.run(
            [sys.executable, "-c", code],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        """``manage.py`` ``args``, left running."""
        command = [sys.executable, "-m", "django", *args]
        return subprocess.Popen(
            command, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
