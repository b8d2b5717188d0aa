"""What the admin tests' child processes share (they import it after ``django.setup()``):
staff users with the permissions named, a logged-in test client, and what a page shows:
the rows listed, the hidden fields a form carries, the messages."""

from __future__ import annotations

import html
import re
from typing import Any

from django.contrib.auth.models import Permission, User
from django.test import Client

OUTBOX = "/admin/mideng/outboxmessage/"
_HIDDEN = re.compile(r'<input type="hidden" name="([^"]*)" value="([^"]*)"')
_MESSAGE = re.compile(r'<li class="(?:success|warning|error|info)">(.*?)</li>', re.S)


def staff(name: str, *permissions: str) -> Client:
    """A client logged in as a staff user (not a superuser) holding ``permissions``
    (``app.codename``)."""
    user = User.objects.create_user(name, password="x", is_staff=True)
    for permission in permissions:
        app, codename = permission.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app, codename=codename)
        )
    client = Client()
    client.force_login(user)
    return client


def text(response: Any) -> str:
    assert response.status_code == 200, response.status_code
    return str(response.content.decode())


def listed(page: str, changelist: str) -> list[str]:
    """The rows a list page links to, in order."""
    return [html.unescape(m) for m in re.findall(rf'href="{changelist}([^"/]+)/change/', page)]


def hidden(page: str) -> list[tuple[str, str]]:
    """The hidden fields of a page's forms, in order, their values unescaped."""
    return [(html.unescape(n), html.unescape(v)) for n, v in _HIDDEN.findall(page)]


def carried(page: str, prefix: str = "seen-") -> dict[str, str]:
    """What the list page carries of each row it shows (``seen-<id>`` fields)."""
    return {n[len(prefix) :]: v for n, v in hidden(page) if n.startswith(prefix)}


def form(fields: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Fields as the test client posts them (a name given more than once: each value)."""
    posted: dict[str, list[str]] = {}
    for name, value in fields:
        posted.setdefault(name, []).append(value)
    return posted


def said(response: Any) -> list[str]:
    """The messages a redirected response's next page shows."""
    return [html.unescape(m.strip()) for m in _MESSAGE.findall(response.content.decode())]


RECORDS = "/admin/mideng/recordlisting/"
OPERATIONS = "/admin/mideng/operationlisting/"
STEPS = "/admin/mideng/steplisting/"


def records_listed(page: str) -> list[list[str]]:
    """The records a list page shows, as [scope, key], in order."""
    import json

    return [json.loads(ident) for ident in carried(page)]
