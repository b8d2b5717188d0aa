"""The shop's settings. Everything that differs between machines comes from the environment:

- ``SHOP_DATABASE_URL``: ``sqlite:///path/shop.db`` (the default: shop.db next to manage.py)
  or ``postgresql://user:password@host:5432/name``;
- ``SHOP_REDIS_URL``: the Redis the outbox relay publishes to and the stock consumer reads;
- ``SHOP_ORDER_EVENTS``, ``SHOP_STOCK_GROUP``: the stream of order events and the stock
  service's consumer group on it;
- ``SHOP_NOTIFY_EVENTS``, ``SHOP_NOTIFY_GROUP``: the notification service's own stream (its
  lane: a slow SMS gateway never holds the stock back) and its group;
- ``SHOP_LEASE``: seconds a consumer or scheduler holds a record before its heartbeat renews
  it; a process killed mid-operation is taken over once it ran out;
- ``SHOP_PROVIDERS_DIR``: where the SMS gateway's and coupon service's stand-ins keep their
  records (orders.providers).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "insecure-example-key-set-SHOP_SECRET_KEY")
DEBUG = os.environ.get("SHOP_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "mideng.contrib.django",
    "orders",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    # Sets request.user from the X-Customer header (orders.customers says why and when).
    "orders.customers.CustomerHeaderMiddleware",
]

ROOT_URLCONF = "shop.urls"
WSGI_APPLICATION = "shop.wsgi.application"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def database(url: str) -> dict[str, Any]:
    """DATABASES' entry for a database URL."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        # IMMEDIATE: an atomic block takes SQLite's write lock when it begins, so concurrent
        # callbacks queue for it instead of failing to upgrade a read lock.
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": unquote(parts.path[1:]),  # sqlite:///shop.db, sqlite:////srv/shop.db
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        }
    if parts.scheme.split("+")[0] in {"postgres", "postgresql"}:  # postgresql+psycopg too
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
        }
    raise ValueError(f"SHOP_DATABASE_URL must be sqlite:/// or postgresql://, not {url!r}")


DATABASES = {
    "default": database(os.environ.get("SHOP_DATABASE_URL", f"sqlite:///{BASE_DIR / 'shop.db'}"))
}

REDIS_URL = os.environ.get("SHOP_REDIS_URL", "redis://127.0.0.1:6379/0")
ORDER_EVENTS = os.environ.get("SHOP_ORDER_EVENTS", "shop.order-events")
STOCK_GROUP = os.environ.get("SHOP_STOCK_GROUP", "stock")
NOTIFY_EVENTS = os.environ.get("SHOP_NOTIFY_EVENTS", "shop.notify-events")
NOTIFY_GROUP = os.environ.get("SHOP_NOTIFY_GROUP", "notify")
PROVIDERS_DIR = Path(os.environ.get("SHOP_PROVIDERS_DIR", BASE_DIR / "providers"))

# mideng's tables live in the default database (its migrations make them); the relay
# publishes the outbox's rows to Redis Streams, each to the stream its row names. The
# notification operation keeps its failures, so its record counts a message's attempts.
MIDENG = {
    "broker": REDIS_URL,
    "lease": float(os.environ.get("SHOP_LEASE", "30")),
    "scopes": {"notify": {"on_error": "retry", "max_attempts": 5}},
}
# @idempotent_view uses the Guard MIDENG describes.
MIDENG_HTTP = {"guard": "mideng.contrib.django.guard"}

# mideng's INFO lines (a duplicate answered, the relay's progress) on the console, next to
# Django's own.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"mideng": {"handlers": ["console"], "level": "INFO"}},
}
