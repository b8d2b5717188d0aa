"""The Django site of the HTTP cases: one view answering the same as the other applications,
and the Guard its middleware runs on (named in the settings as ``bench.django_site.guard``).
Django imports it once the case has configured its settings."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from bench.web import ANSWER
from mideng import Guard
from mideng.stores.memory import MemoryStore


def orders(request: HttpRequest) -> HttpResponse:
    return HttpResponse(ANSWER, status=201, content_type="application/json")


urlpatterns = [path("orders", orders)]
guard = Guard(MemoryStore())


def settings(guarded: bool) -> dict[str, object]:
    """The settings of a site serving ``orders``, with mideng's middleware or none."""
    return {
        "DEBUG": False,
        "ALLOWED_HOSTS": ["*"],
        "ROOT_URLCONF": __name__,
        "MIDDLEWARE": ["mideng.http.django.IdempotencyMiddleware"] if guarded else [],
        "MIDENG_HTTP": {"guard": f"{__name__}.guard"},
    }
