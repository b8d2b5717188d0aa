"""Requests to the Django project's dashboard, their statuses and bodies as JSON on stdout."""

from __future__ import annotations

import json
import os
import sys

import django

os.environ["DJANGO_SETTINGS_MODULE"] = "tests.dashboard.djangoproject.settings"
django.setup()

from django.test import Client  # noqa: E402

client = Client()
found = {}
for path in sys.argv[1:]:
    headers = {} if path.startswith("!") else {"x-operator": "yes"}
    reply = client.get(path.lstrip("!"), headers=headers)
    found[path] = {
        "status": reply.status_code,
        "body": reply.content.decode(),
        "csp": reply.get("content-security-policy", ""),
    }
post = client.post("/ops/actions/release", {"csrf": "x"}, headers={"x-operator": "yes"})
found["post"] = {"status": post.status_code, "body": post.content.decode(), "csp": ""}
release = os.environ.get("DASHBOARD_RELEASE")  # scope:key to release through the page's form
if release:
    from tests.dashboard.forms import form_fields

    scope, _, key = release.partition(":")
    page = client.get(f"/ops/record?scope={scope}&key={key}", headers={"x-operator": "yes"})
    fields = {**form_fields(page.content.decode(), "release"), "confirm": key}
    headers = {"x-operator": "yes", "origin": "http://testserver"}
    done = client.post("/ops/actions/release", fields, headers=headers)
    again = client.post("/ops/actions/release", fields, headers=headers)
    found["release"] = {"status": done.status_code, "body": done.content.decode(), "csp": ""}
    found["again"] = {"status": again.status_code, "body": again.content.decode(), "csp": ""}
if os.environ.get("DASHBOARD_DEFAULT_AUTH") == "1":
    from types import SimpleNamespace

    from django.test import RequestFactory

    from mideng.dashboard.django import view

    users = {
        "staff": SimpleNamespace(is_authenticated=True, is_staff=True, get_username=lambda: "ann"),
        "user": SimpleNamespace(is_authenticated=True, is_staff=False, get_username=lambda: "bo"),
        "anonymous": SimpleNamespace(is_authenticated=False, is_staff=False),
    }
    for name, user in users.items():
        request = RequestFactory().get("/ops/")
        request.user = user  # type: ignore[assignment]  # as AuthenticationMiddleware sets it
        reply = view(request, "")
        found[name] = {"status": reply.status_code, "body": reply.content.decode(), "csp": ""}
json.dump(found, sys.stdout)
