"""The dashboard in a Django project: ``path("ops/", include("mideng.dashboard.django"))``,
configured by ``settings.MIDENG_DASHBOARD`` (a dict of ``Settings``' fields: ``store``,
``db``, ``actions``, ``authenticate``...). The pages are the same code the ASGI app runs
(``routes.handle``), carried out with blocking calls.

Django's own authentication is the default ``authenticate``: a signed-in staff user, named
by their username; the allowed hosts default to Django's ``ALLOWED_HOSTS``.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from mideng.core import effects
from mideng.dashboard.exchange import Request
from mideng.dashboard.routes import handle
from mideng.dashboard.settings import Settings
from mideng.dashboard.wiring import Wired

app_name = "mideng_dashboard"
_made: dict[str, tuple[Settings, Wired]] = {}
_lock = threading.Lock()


def _wired() -> tuple[Settings, Wired]:
    with _lock:  # two first requests at once open one Guard, not two
        if "it" not in _made:
            from django.conf import settings as django_settings

            given = dict(getattr(django_settings, "MIDENG_DASHBOARD", {}))
            given.setdefault("allowed_hosts", tuple(django_settings.ALLOWED_HOSTS) or ("*",))
            settings = Settings(**given)
            _made["it"] = (settings, Wired(settings))
        return _made["it"]


def _staff(request: Any) -> str | None:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not user.is_staff:
        return None
    return str(user.get_username())


def view(request: Any, subpath: str = "") -> Any:
    from django.http import HttpResponse

    settings, wired = _wired()
    if settings.authenticate is None and settings.token is None:
        # Django's users by default; the callable sees the Django request through a closure.
        settings = dataclasses.replace(settings, authenticate=lambda _h: _staff(request))
    root = request.path[: len(request.path) - len(subpath)].rstrip("/")
    incoming = Request(
        request.method,
        "/" + subpath,
        root,
        {k: request.GET[k] for k in request.GET},
        {k: request.POST[k] for k in request.POST} if request.method == "POST" else {},
        # Django's own host (it checks ALLOWED_HOSTS), as a header the checks read.
        {**{k.lower(): v for k, v in request.headers.items()}, "host": request.get_host()},
        dict(request.COOKIES),
        request.scheme,
    )
    reply = effects.run(handle(settings, wired.dashboard, incoming))
    response = HttpResponse(reply.body, status=reply.status)
    for name, value in reply.all_headers():
        if name == "set-cookie":
            cookie_name, _, rest = value.partition("=")
            response.cookies[cookie_name] = rest.split(";", 1)[0]
            morsel = response.cookies[cookie_name]
            morsel["httponly"], morsel["samesite"] = True, "Strict"
            morsel["path"] = root or "/"
            morsel["secure"] = request.scheme == "https"
        else:
            response[name] = value
    return response


def _urls() -> list[Any]:
    from django.urls import path
    from django.views.decorators.csrf import csrf_exempt

    # The dashboard checks its own CSRF token and Origin on every POST (exchange.check_post).
    page = csrf_exempt(view)
    return [path("", page, name="overview"), path("<path:subpath>", page, name="page")]


urlpatterns = _urls()
