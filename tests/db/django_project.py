"""A Django project on one database, in a child process: Django's settings are process-wide and
the HTTP tests configure their own, so scenarios on a Django connection run in a process of
their own per database, which prints what each found as JSON on its last line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from tests.services import sql_url

SETTINGS = """
SECRET_KEY = "tests-only"
USE_TZ = True
INSTALLED_APPS: list[str] = []
DATABASES = {{"default": {database}}}
"""

FAMILIES = ["sqlite", "postgresql", "mysql"]


def _database(url: str) -> dict[str, Any]:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        # IMMEDIATE: a block takes the write lock when it begins, so concurrent blocks queue
        # for it (for up to the timeout) rather than fail to upgrade a read lock.
        options = {"transaction_mode": "IMMEDIATE", "timeout": 30}
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parsed.database, "OPTIONS": options}
    engine = "postgresql" if parsed.get_backend_name() == "postgresql" else "mysql"
    return {
        "ENGINE": f"django.db.backends.{engine}",
        "NAME": parsed.database,
        "USER": parsed.username,
        "PASSWORD": parsed.password or "",
        "HOST": parsed.host,
        "PORT": str(parsed.port),
    }


def project_env(family: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a child process whose Django project is on ``family``'s database:
    ``DJANGO_SETTINGS_MODULE``, ``SCENARIO_STORE`` (the same database as a mideng store URL)
    and ``SCENARIO_SUFFIX`` (the tables' suffix)."""
    url = sql_url(family, tmp_path / "shop.db")
    settings = SETTINGS.format(database=repr(_database(url)))
    if family == "mysql":
        settings = "import pymysql\n\npymysql.install_as_MySQLdb()\n" + settings
    (tmp_path / "scenario_settings.py").write_text(textwrap.dedent(settings))
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]),
        DJANGO_SETTINGS_MODULE="scenario_settings",
        SCENARIO_STORE=url,
        SCENARIO_SUFFIX=uuid.uuid4().hex[:8],
    )


def run_scenarios(module: str, family: str, tmp_path: Path) -> Any:
    """What ``python -m module`` found, on ``family``'s database."""
    env = project_env(family, tmp_path)
    command = [sys.executable, "-m", module]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
