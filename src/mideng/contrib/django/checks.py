"""System checks of the app (``manage.py check``, and every ``runserver`` / ``migrate``):
what would make mideng fail at the first request, or guard less than it seems to.

- ``mideng.E001``: the store URL names no store mideng has (or is not a URL);
- ``mideng.E002``: ``MIDENG["database"]`` is not an alias of DATABASES;
- ``mideng.E003``: the Idempotency-Key middleware comes before AuthenticationMiddleware, so
  ``request.user`` is not there when it scopes a key: every user's keys would be one space;
- ``mideng.E004``: a database has ``ATOMIC_REQUESTS`` while a scope is declared with external
  effects (``on_expiry="unknown"``): its claim would roll back with the request's transaction
  while the effect stays done, so a retry repeats it;
- ``mideng.W001``: the middleware comes before GZipMiddleware, so it stores the compressed
  body and replays it to a client whatever its Accept-Encoding.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from mideng.contrib.django.settings import SETTING, Config, config
from mideng.errors import ConfigurationError
from mideng.stores.registry import scheme_of, schemes

MIDDLEWARE = "mideng.http.django.IdempotencyMiddleware"
AUTHENTICATION = "django.contrib.auth.middleware.AuthenticationMiddleware"
GZIP = "django.middleware.gzip.GZipMiddleware"


def store_url(found: Config) -> list[checks.CheckMessage]:
    """E001: the store URL opens a store mideng has (checked without connecting)."""
    if found.store is None and found.database not in settings.DATABASES:
        return []  # no URL to check: E002 says why
    try:
        url = found.store_url()
        scheme = scheme_of(url)
    except (ConfigurationError, ImproperlyConfigured) as exc:
        return [_error(1, f"mideng's store URL is refused: {exc}", "Set MIDENG['store'].")]
    if scheme not in schemes():
        return [
            _error(
                1,
                f"mideng has no store for the scheme {scheme!r} of MIDENG's store URL",
                f"Use one of: {', '.join(schemes())}.",
            )
        ]
    return []


def database(found: Config) -> list[checks.CheckMessage]:
    """E002: the alias mideng's tables live in is one of the project's databases."""
    if found.database in settings.DATABASES:
        return []
    return [
        _error(
            2,
            f"{SETTING}['database'] is {found.database!r}, which is not in settings.DATABASES",
            f"Name one of: {', '.join(settings.DATABASES)}.",
        )
    ]


def middleware_order(found: Config) -> list[checks.CheckMessage]:
    """E003 and W001: where the Idempotency-Key middleware stands among the others."""
    chain = list(getattr(settings, "MIDDLEWARE", None) or ())
    if MIDDLEWARE not in chain:
        return []
    at = chain.index(MIDDLEWARE)
    found_messages: list[checks.CheckMessage] = []
    if AUTHENTICATION in chain and chain.index(AUTHENTICATION) > at:
        found_messages.append(
            _error(
                3,
                "the Idempotency-Key middleware comes before AuthenticationMiddleware: "
                "request.user is not set when it scopes a key, so every user's keys share "
                "one space (one user could replay another's stored response)",
                f"Move {MIDDLEWARE} after {AUTHENTICATION}.",
            )
        )
    if GZIP in chain and chain.index(GZIP) > at:
        found_messages.append(
            checks.Warning(
                "the Idempotency-Key middleware comes before GZipMiddleware: it stores the "
                "compressed body and replays it whatever the client accepts",
                hint=f"Move {MIDDLEWARE} after {GZIP}.",
                id="mideng.W001",
            )
        )
    return found_messages


def atomic_requests(found: Config) -> list[checks.CheckMessage]:
    """E004: no request-wide transaction where a scope has external effects."""
    external = found.external_scopes
    atomic = [alias for alias, entry in settings.DATABASES.items() if entry.get("ATOMIC_REQUESTS")]
    if not external or not atomic:
        return []
    return [
        _error(
            4,
            f"ATOMIC_REQUESTS is on for {', '.join(atomic)} while {SETTING} declares external "
            f"effects for {', '.join(external)}: a claim made in the request's transaction "
            "rolls back with it while the effect stays done, so a retry repeats the effect",
            "Turn ATOMIC_REQUESTS off, or wrap those views in transaction.non_atomic_requests.",
        )
    ]


def _error(number: int, message: str, hint: str) -> checks.Error:
    return checks.Error(message, hint=hint, id=f"mideng.E{number:03d}")


def mideng_settings(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    found = config()
    return [
        *store_url(found),
        *database(found),
        *middleware_order(found),
        *atomic_requests(found),
    ]


def register() -> None:
    checks.register(mideng_settings, "mideng")
