"""Who the customer is: the user the ``X-Customer`` header names, made on first sight.

This stands in for the shop's real sign-in (a session, a token) so that the README's curl
commands stay one line. It trusts the header, so use it only where a gateway in front sets
the header itself and drops the client's; otherwise use your authentication instead.
``@idempotent_view`` keys belong to ``request.user``, whichever middleware sets it.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse


class CustomerHeaderMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        name = request.headers.get("X-Customer", "").strip()
        # get_or_create: two first requests of one customer at once make one user.
        request.user = (
            get_user_model().objects.get_or_create(username=name)[0] if name else AnonymousUser()
        )
        return self.get_response(request)
