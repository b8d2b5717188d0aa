"""The app's system checks: ``manage.py check`` reports each misconfiguration with its own
id, in a child process per project (tests/contrib/django/project.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.contrib.django.project import Project, django_database

MIDDLEWARE = "mideng.http.django.IdempotencyMiddleware"
SESSIONS = "django.contrib.sessions.middleware.SessionMiddleware"
AUTH = "django.contrib.auth.middleware.AuthenticationMiddleware"
GZIP = "django.middleware.gzip.GZipMiddleware"


def _check(tmp_path: Path, mideng: dict[str, Any], **more: Any) -> tuple[int, str]:
    database = {**django_database(f"sqlite:///{tmp_path / 'p.db'}"), **more.pop("entry", {})}
    done = Project(tmp_path, database, mideng, more).manage("check")
    return done.returncode, done.stdout + done.stderr


def test_a_well_configured_project_passes(tmp_path: Path) -> None:
    code, said = _check(
        tmp_path,
        {"scopes": {"charge": {"on_expiry": "unknown"}}},
        MIDDLEWARE=[SESSIONS, AUTH, GZIP, MIDDLEWARE],
    )
    assert code == 0, said
    assert "no issues" in said


@pytest.mark.parametrize(
    ("mideng", "more", "found"),
    [
        ({"store": "mongo://db/x"}, {}, "(mideng.E001) mideng has no store for the scheme 'mongo'"),
        ({"store": "not a url"}, {}, "(mideng.E001) mideng's store URL is refused"),
        ({"database": "records"}, {}, "(mideng.E002) MIDENG['database'] is 'records'"),
        (
            {},
            {"MIDDLEWARE": [SESSIONS, MIDDLEWARE, AUTH]},
            "(mideng.E003) the Idempotency-Key middleware comes before AuthenticationMiddleware",
        ),
        (
            {"scopes": {"charge": {"on_expiry": "unknown"}}},
            {"entry": {"ATOMIC_REQUESTS": True}},
            "(mideng.E004) ATOMIC_REQUESTS is on for default while MIDENG declares external "
            "effects for charge",
        ),
        (
            {},
            {"MIDDLEWARE": [SESSIONS, AUTH, MIDDLEWARE, GZIP]},
            "(mideng.W001) the Idempotency-Key middleware comes before GZipMiddleware",
        ),
    ],
)
def test_check_reports_each_misconfiguration(
    tmp_path: Path, mideng: dict[str, Any], more: dict[str, Any], found: str
) -> None:
    code, said = _check(tmp_path, mideng, **more)
    assert found in said
    assert said.count("(mideng.") == 1  # this one alone
    assert code == (0 if ".W" in found else 1), said


def test_atomic_requests_without_external_effects_is_fine(tmp_path: Path) -> None:
    scopes = {"orders": {"lease": 5}}
    code, said = _check(tmp_path, {"scopes": scopes}, entry={"ATOMIC_REQUESTS": True})
    assert code == 0, said
