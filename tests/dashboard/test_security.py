"""The dashboard's guards: loopback unless authenticated, the Host allow-list, tokens and an
application's callable, POSTs only from its own pages with their CSRF token, actions refused
when off, a strict Content-Security-Policy and nothing loaded from another origin."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from mideng.cli import main
from mideng.dashboard import Settings, app
from mideng.dashboard.exchange import CSRF_COOKIE
from mideng.errors import ConfigurationError
from tests.dashboard.client import Client
from tests.dashboard.data import Seeded

TOKEN = "a-token-of-enough-length"
RECORDS = 5


def _client(filled: Seeded, **options: object) -> Client:
    return Client(app(filled.guard, None, **options))


def _csrf(c: Client) -> str:
    page = c.get("/", headers={"authorization": f"Bearer {TOKEN}"})
    token = c.http.cookies.get(CSRF_COOKIE)
    assert token is not None
    assert f'value="{token}"' in page.text or "csrf" not in page.text
    return token


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::"])
def test_a_bind_beyond_loopback_needs_authentication(host: str, filled: Seeded) -> None:
    with pytest.raises(ConfigurationError, match="without authentication"):
        Settings(filled.guard).check_bind(host)
    Settings(filled.guard, token=TOKEN).check_bind(host)
    Settings(filled.guard, authenticate=lambda headers: "x").check_bind(host)
    Settings(filled.guard).check_bind("127.0.0.1")


def test_the_command_refuses_a_public_bind_without_a_token(filled: Seeded) -> None:
    result = CliRunner().invoke(
        main, ["dashboard", "--store", f"sqlite:///{filled.store_url[10:]}", "--host", "0.0.0.0"]
    )
    assert result.exit_code != 0
    assert "without authentication" in result.output
    assert "Traceback" not in result.output
    short = CliRunner().invoke(main, ["dashboard", "--store", "memory://", "--token", "short"])
    assert short.exit_code != 0
    assert "16 characters" in short.output


def test_only_allowed_host_names_are_answered(filled: Seeded) -> None:
    with _client(filled) as c:
        assert c.get("/").status_code == 200
        assert c.get("/", headers={"host": "localhost:8765"}).status_code == 200
        assert c.get("/", headers={"host": "evil.example"}).status_code == 400
        assert c.get("/", headers={"host": "127.0.0.1.evil.example"}).status_code == 400
    with _client(filled, allowed_hosts=("ops.internal",), token=TOKEN) as c:
        bearer = {"authorization": f"Bearer {TOKEN}"}
        assert c.get("/", headers={"host": "ops.internal", **bearer}).status_code == 200
        assert c.get("/", headers=bearer).status_code == 400


def test_a_token_is_asked_for_and_kept_in_a_strict_cookie(filled: Seeded) -> None:
    with _client(filled, token=TOKEN) as c:
        assert c.get("/").status_code == 401
        assert (
            c.get("/", headers={"authorization": "Bearer wrong-token-xxxxxxxx"}).status_code == 401
        )
        assert c.get("/", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
        login = c.get("/login")
        assert login.status_code == 200
        csrf = c.http.cookies[CSRF_COOKIE]
        origin = {"origin": "http://127.0.0.1"}
        refused = c.post("/login", data={"token": "nope", "csrf": csrf}, headers=origin)
        assert refused.status_code == 401
        signed = c.post("/login", data={"token": TOKEN, "csrf": csrf}, headers=origin)
        assert signed.status_code == 303
        assert "HttpOnly" in signed.headers["set-cookie"]
        assert "SameSite=Strict" in signed.headers["set-cookie"]
        assert c.get("/").status_code == 200  # the cookie now


def test_an_application_callable_decides_who_is_in(filled: Seeded) -> None:
    def who(headers: object) -> str | None:
        assert isinstance(headers, dict)
        return "alice" if headers.get("x-user") == "alice" else None

    with _client(filled, authenticate=who) as c:
        assert c.get("/").status_code == 401
        page = c.get("/", headers={"x-user": "alice"})
        assert page.status_code == 200
        assert "alice" in page.text


def test_posts_need_this_origin_and_the_csrf_token(filled: Seeded) -> None:
    with _client(filled, token=TOKEN, actions=True) as c:
        csrf = _csrf(c)
        bearer = {"authorization": f"Bearer {TOKEN}"}
        form = {"csrf": csrf}
        no_origin = c.post("/actions/release", data=form, headers=bearer)
        assert no_origin.status_code == 403
        other = c.post(
            "/actions/release", data=form, headers={**bearer, "origin": "http://evil.example"}
        )
        assert other.status_code == 403
        wrong = c.post(
            "/actions/release",
            data={"csrf": "x" * 43},
            headers={**bearer, "origin": "http://127.0.0.1"},
        )
        assert wrong.status_code == 403
        assert "CSRF" in wrong.text


def test_actions_are_refused_on_the_server_when_off(filled: Seeded) -> None:
    with _client(filled) as c:
        csrf = _csrf(c)
        for name in ("resolve", "release", "requeue", "reconcile"):
            reply = c.post(
                f"/actions/{name}",
                data={"csrf": csrf, "scope": filled.scope("charge"), "key": "c1"},
                headers={"origin": "http://127.0.0.1"},
            )
            assert reply.status_code == 403, name
            assert "read-only" in reply.text
        assert c.get("/actions/release").status_code in (404, 405)
    record = filled.guard.get(filled.scope("charge"), "c1")
    assert record is not None
    assert record.status.value == "unknown"


def test_every_reply_has_a_strict_policy_and_loads_nothing_elsewhere(filled: Seeded) -> None:
    with _client(filled) as c:
        for path in ("/", "/records", "/operations", "/nope", "/static/dashboard.css"):
            reply = c.get(path)
            policy = reply.headers["content-security-policy"]
            assert "default-src 'none'" in policy
            assert "script-src" not in policy  # none at all: default-src 'none' covers it
            assert "style-src 'self'" in policy
            assert reply.headers["x-content-type-options"] == "nosniff"
            assert "frame-ancestors 'none'" in policy
            assert not re.search(r"(?:src|href|action)=\"(?:https?:)?//", reply.text)
            assert "<script" not in reply.text
            assert " style=" not in reply.text
        assert c.get("/static/../settings.py").status_code == 404
        assert c.get("/static/dashboard.css").headers["content-type"].startswith("text/css")
