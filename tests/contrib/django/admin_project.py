"""A Django project with the admin installed over the app, migrated (auth, sessions, mideng),
on a database of its own, run in child processes like the other app tests."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from mideng import Guard, open_store
from tests.contrib.django.project import Project, django_database
from tests.contrib.django.test_commands import SHOP

URLS = """
import shop_ops  # registers its operations, so the admin's reconcile can run them
from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
"""

ADMIN_SETTINGS: dict[str, Any] = {
    "ROOT_URLCONF": "admin_urls",
    "ALLOWED_HOSTS": ["testserver"],
    "MIDDLEWARE": [
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.common.CommonMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
    ],
    "TEMPLATES": [
        {
            "BACKEND": "django.template.backends.django.DjangoTemplates",
            "APP_DIRS": True,
            "OPTIONS": {
                "context_processors": [
                    "django.template.context_processors.request",
                    "django.contrib.auth.context_processors.auth",
                    "django.contrib.messages.context_processors.messages",
                ]
            },
        }
    ],
}
APPS = (
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
)
PRELUDE = """
import json
import django
django.setup()
from tests.contrib.django.admin_client import *
"""


class AdminShop:
    """A migrated project with the admin, on ``url``: its tables' names and URL."""

    def __init__(self, folder: Path, url: str) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.records, self.outbox, self.url = f"rec_{suffix}", f"box_{suffix}", url
        names = {"records": self.records, "outbox": self.outbox}
        self.project = Project(folder, django_database(url), names, more=ADMIN_SETTINGS, apps=APPS)
        (folder / "admin_urls.py").write_text(URLS)
        (folder / "shop_ops.py").write_text(SHOP)
        done = self.project.manage("migrate")
        assert done.returncode == 0, done.stderr

    def guard(self) -> Guard:
        """A Guard on the project's record table, from this process."""
        return Guard(open_store(self.url, table=self.records, auto_upgrade=False))

    def run(self, code: str) -> Any:
        """``code`` in a child process with Django set up and the admin client's helpers
        imported; what it assigns to ``out``, as JSON."""
        script = PRELUDE + code + "\nprint('OUT ' + json.dumps(out))\n"
        done = self.project.python(script)
        assert done.returncode == 0, done.stdout + done.stderr
        line = [x for x in done.stdout.splitlines() if x.startswith("OUT ")][-1]
        return json.loads(line[4:])
