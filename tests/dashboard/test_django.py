"""The dashboard included in a Django project under ``ops/`` (run in a process of its own, so
its settings touch no other test): the same pages as the ASGI app, links under the prefix,
the application's callable deciding who is in, POSTs checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.dashboard.data import seeded

ROOT = Path(__file__).resolve().parents[2]


def _requests(store_url: str, paths: list[str], **env: str) -> dict[str, Any]:
    """The project's answers to ``paths`` (and its POSTs), run in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.dashboard.djangoproject.run", *paths],
        cwd=ROOT,
        env={
            **os.environ,
            **env,
            "DASHBOARD_STORE": store_url,
            "PYTHONPATH": os.pathsep.join(sys.path),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_the_django_include_serves_the_pages(tmp_path: Path) -> None:
    s = seeded("sqlite", tmp_path, records=3)
    try:
        pay = s.scope("pay")
        paths = [
            "/ops/",
            "/ops/records",
            f"/ops/record?scope={s.scope('xss')}&key=x1",
            f"/ops/records?scope={pay}&status=succeeded",
            "/ops/static/dashboard.css",
            "!/ops/",
            "/ops/records?status=nope",
        ]
        found = _requests(s.store_url, paths)
    finally:
        s.close()
    overview = found["/ops/"]
    assert overview["status"] == 200, overview["body"]
    assert "dj-operator" in overview["body"]
    assert 'href="/ops/records"' in overview["body"]
    assert "default-src 'none'" in overview["csp"]
    assert found["/ops/records"]["status"] == 200
    assert "order-0002" in found[f"/ops/records?scope={pay}&status=succeeded"]["body"]
    xss = found[f"/ops/record?scope={s.scope('xss')}&key=x1"]["body"]
    assert "&lt;script&gt;" in xss
    assert "<script>" not in xss
    assert found["/ops/static/dashboard.css"]["status"] == 200
    assert found["!/ops/"]["status"] == 401
    assert found["/ops/records?status=nope"]["status"] == 400
    assert found["post"]["status"] == 403


def test_an_action_through_the_django_include(tmp_path: Path) -> None:
    s = seeded("sqlite", tmp_path, records=1)
    try:
        found = _requests(
            s.store_url,
            ["/ops/"],
            DASHBOARD_ACTIONS="1",
            DASHBOARD_RELEASE=f"{s.scope('charge')}:c1",
        )
        assert found["post"]["status"] == 403  # a forged CSRF token
        assert found["release"]["status"] == 200, found["release"]["body"]
        assert found["again"]["status"] == 409  # released already: gone since the look
        assert s.guard.get(s.scope("charge"), "c1") is None
    finally:
        s.close()


def test_django_staff_users_are_let_in_by_default(tmp_path: Path) -> None:
    s = seeded("sqlite", tmp_path, records=1)
    try:
        found = _requests(s.store_url, [], DASHBOARD_DEFAULT_AUTH="1")
    finally:
        s.close()
    assert found["staff"]["status"] == 200
    assert "ann" in found["staff"]["body"]
    assert found["user"]["status"] == 401
    assert found["anonymous"]["status"] == 401
