"""One request through the dashboard, for every front: the checks (``exchange``), then a page,
an asset or an action, as a ``Reply``. A procedure of effects, so Starlette awaits the store's
async operations and Django calls its blocking ones, through the same code."""

from __future__ import annotations

import html
from importlib import resources

from mideng.core import effects
from mideng.core.effects import Effects
from mideng.dashboard.actions import ACTIONS
from mideng.dashboard.exchange import (
    TOKEN_COOKIE,
    Refused,
    Reply,
    Request,
    check_post,
    cookie,
    csrf_token,
    host_allowed,
    operator,
)
from mideng.dashboard.pages import PAGES, BadRequest, Dashboard
from mideng.dashboard.render import render
from mideng.dashboard.settings import Settings
from mideng.errors import StoreUnavailableError

ASSETS = {"dashboard.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml"}


def handle(settings: Settings, dash: Dashboard, request: Request) -> Effects[Reply]:
    try:
        if not host_allowed(settings, request):
            raise Refused(400, "this Host is not one the dashboard answers to")
        if request.path.startswith("/static/"):
            return asset(request.path.removeprefix("/static/"))
        if request.path == "/login":
            return (yield from effects.answer(login(settings, request)))
        who = operator(settings, request)
        if request.method == "POST":
            check_post(request)
            if not settings.actions:
                raise Refused(403, "actions are off: this dashboard is read-only")
            action = ACTIONS.get(request.path.removeprefix("/actions/"))
            if action is None or not request.path.startswith("/actions/"):
                raise Refused(404, "no such action")
            work = action(dash, request.form, who)
        elif request.method in ("GET", "HEAD"):
            page = PAGES.get(request.path)
            if page is None:
                raise Refused(404, "no such page")
            work = page(dash, request.query)
        else:
            raise Refused(405, "method not allowed")
        try:
            shown = yield from work
        except BadRequest as exc:
            raise Refused(400, str(exc)) from exc
        except StoreUnavailableError as exc:
            raise Refused(503, f"the store is unavailable: {exc}") from exc
        token, set_cookie = csrf_token(request)
        values = {**shown.values, **base_values(settings, request, who, token)}
        return Reply(
            shown.status, render(shown.template, values, settings.redaction), headers=set_cookie
        )
    except Refused as refused:
        return refusal(settings, request, refused)


def base_values(settings: Settings, request: Request, who: str, token: str) -> dict[str, object]:
    return {
        "title": settings.title,
        "root": request.root.rstrip("/"),
        "path": request.path,
        "operator": who,
        "csrf": token,
        "actions": settings.actions,
        "outbox_on": True,
    }


def refusal(settings: Settings, request: Request, refused: Refused) -> Reply:
    body = (
        "<!doctype html><meta charset=utf-8><title>mideng</title>"
        f"<link rel=stylesheet href='{html.escape(request.link('/static/dashboard.css'))}'>"
        f"<link rel=icon href='{html.escape(request.link('/static/favicon.svg'))}'>"
        f"<main><h1>{refused.status}</h1><p class=why>{html.escape(refused.why)}</p>"
        f"<p><a href='{html.escape(request.link('/'))}'>overview</a></p></main>"
    )
    return Reply(refused.status, body.encode())


def asset(name: str) -> Reply:
    kind = ASSETS.get(name)
    if kind is None:
        raise Refused(404, "no such file")
    data = resources.files("mideng.dashboard").joinpath("static").joinpath(name).read_bytes()
    return Reply(200, data, kind)


def login(settings: Settings, request: Request) -> Reply:
    """The sign-in form (a token), and its POST: the token kept in an HttpOnly cookie."""
    if request.method == "POST":
        check_post(request)
        token = request.form.get("token", "")
        if settings.token is None or not _same(token, settings.token):
            raise Refused(401, "that token is not this dashboard's")
        return Reply(
            303,
            b"",
            headers=[
                ("location", request.link("/")),
                ("set-cookie", cookie(request, TOKEN_COOKIE, token)),
            ],
        )
    token, set_cookie = csrf_token(request)
    body = render("login.html", base_values(settings, request, "", token), settings.redaction)
    return Reply(200, body, headers=set_cookie)


def _same(given: str, token: str) -> bool:
    import hmac

    return hmac.compare_digest(given.encode(), token.encode())
