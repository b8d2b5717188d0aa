"""Who is signed in, for the decorated views: Django's request.user from X-User, DRF's from
``Authorization: User <name>`` (a module of its own: DRF imports BearerUser from the settings
while its views are defined)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from rest_framework.authentication import BaseAuthentication  # type: ignore[import-untyped]


@dataclass(frozen=True)
class Member:
    """A signed-in user, as much of one as the views and user_principal read."""

    pk: str
    is_authenticated: bool = True


@dataclass(frozen=True)
class Nobody:
    pk: None = None
    is_authenticated: bool = False


def header_user(get_response: Callable[[HttpRequest], Any]) -> Callable[[HttpRequest], Any]:
    """The authentication middleware of this project: the user is the X-User header."""

    def middleware(request: HttpRequest) -> Any:
        name = request.headers.get("x-user")
        request.user = Member(name) if name else Nobody()  # type: ignore[assignment]
        return get_response(request)

    return middleware


class BearerUser(BaseAuthentication):  # type: ignore[misc]
    """DRF's authentication here reads ``Authorization: User <name>``, not X-User, so a DRF
    view's keys are seen to follow the user DRF authenticated."""

    def authenticate(self, request: Any) -> tuple[Member, None] | None:
        scheme, _, name = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        return (Member(name), None) if scheme == "User" and name else None
