"""A Django project that includes the dashboard under ``ops/`` (tests/dashboard/test_django)."""

from __future__ import annotations

import os
from collections.abc import Mapping

SECRET_KEY = "tests-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
ROOT_URLCONF = "tests.dashboard.djangoproject.urls"
INSTALLED_APPS: list[str] = []
DATABASES: dict[str, object] = {}
USE_TZ = True
MIDDLEWARE: list[str] = []


def operator(headers: Mapping[str, str]) -> str | None:
    return "dj-operator" if headers.get("x-operator") == "yes" else None


MIDENG_DASHBOARD = {
    "store": os.environ["DASHBOARD_STORE"],
    "authenticate": operator,
    "actions": os.environ.get("DASHBOARD_ACTIONS") == "1",
}

if os.environ.get("DASHBOARD_DEFAULT_AUTH") == "1":  # Django's staff users, the default
    del MIDENG_DASHBOARD["authenticate"]
