"""One request to the dashboard as every front (Starlette, Django) hands it over, and the
reply it gets, with the checks every request passes first.

The checks hold no state of their own, so a restart forgets nothing: the Host header against
the allow-list (a DNS-rebinding page names its own host), the operator (a token in a cookie
or an ``Authorization: Bearer`` header, or the application's callable), and on every POST an
``Origin`` (or ``Referer``) of this very host and a CSRF token that equals the browser's
``mideng_csrf`` cookie (SameSite=Strict: another site can neither read nor send it).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from mideng.dashboard.settings import Settings

CSRF_COOKIE = "mideng_csrf"
TOKEN_COOKIE = "mideng_token"

#: Every reply's headers: nothing loads from elsewhere, nothing runs inline, no framing.
SECURITY_HEADERS = (
    (
        "content-security-policy",
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("cache-control", "no-store"),
)


@dataclass(frozen=True)
class Request:
    """``path`` is below the dashboard's mount (``/`` its overview); ``root`` is the mount's
    prefix, which every link starts with; header names are lower-case."""

    method: str
    path: str
    root: str
    query: Mapping[str, str]
    form: Mapping[str, str]
    headers: Mapping[str, str]
    cookies: Mapping[str, str]
    scheme: str = "http"

    def link(self, path: str) -> str:
        return self.root.rstrip("/") + path


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)

    def all_headers(self) -> list[tuple[str, str]]:
        return [("content-type", self.content_type), *SECURITY_HEADERS, *self.headers]


class Refused(Exception):
    """A request the checks turn away: its status and why (shown as text, escaped)."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status
        self.why = why


def host_allowed(settings: Settings, request: Request) -> bool:
    host = request.headers.get("host", "")
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return name in settings.allowed_hosts or "*" in settings.allowed_hosts


def operator(settings: Settings, request: Request) -> str:
    """Who the request is from; ``Refused(401)`` when it must say and does not."""
    if settings.authenticate is not None:
        who = settings.authenticate(request.headers)
        if who is None:
            raise Refused(401, "not signed in")
        return who
    token = settings.token
    if token is None:
        return "local operator"
    given = request.cookies.get(TOKEN_COOKIE) or _bearer(request.headers)
    if given is None or not hmac.compare_digest(given.encode(), token.encode()):
        raise Refused(401, "a token is required: open the sign-in page")
    return "token holder"


def _bearer(headers: Mapping[str, str]) -> str | None:
    scheme, _, value = headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def check_post(request: Request) -> None:
    """A state-changing request comes from a page of this dashboard, with its CSRF token."""
    host = request.headers.get("host", "")
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin or urlsplit(origin).netloc != host:
        raise Refused(403, "cross-origin request refused")
    cookie = request.cookies.get(CSRF_COOKIE, "")
    sent = request.form.get("csrf", "")
    if not cookie or not hmac.compare_digest(cookie.encode(), sent.encode()):
        raise Refused(403, "the form's CSRF token does not match: reload the page")


def csrf_token(request: Request) -> tuple[str, list[tuple[str, str]]]:
    """The browser's CSRF token, and the cookie to set when it has none yet."""
    known = request.cookies.get(CSRF_COOKIE)
    if known and len(known) >= 32:
        return known, []
    fresh = secrets.token_urlsafe(32)
    return fresh, [("set-cookie", cookie(request, CSRF_COOKIE, fresh))]


def cookie(request: Request, name: str, value: str) -> str:
    path = request.root.rstrip("/") or "/"
    secure = "; Secure" if request.scheme == "https" else ""
    return f"{name}={value}; Path={path}; HttpOnly; SameSite=Strict{secure}"
