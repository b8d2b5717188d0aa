"""The project's Guard, built from ``settings.MIDENG`` on first use, once per process.

``guard()`` is what views, consumers and ``MIDENG_HTTP = {"guard":
"mideng.contrib.django.guard"}`` share: one store, one connection pool, the scopes the setting
configures. Made under a lock, so two first requests at once do not each open a store.
"""

from __future__ import annotations

import threading
from typing import Any

from mideng.contrib.django.settings import Config, config
from mideng.guard import Guard
from mideng.stores.registry import open_store, scheme_of

_made: list[Guard] = []  # the one Guard, once made
_making = threading.Lock()


def _on_database(url: str) -> bool:
    """Whether the store keeps its records in a SQL table (whose name the setting gives)."""
    return scheme_of(url).split("+")[0] in ("sqlite", "postgresql", "postgres", "mysql", "mariadb")


def build(settings: Config) -> Guard:
    """A Guard on the setting's store, with its scopes configured. The tables are the
    migrations' (``manage.py migrate``): the store never creates or upgrades them."""
    url = settings.store_url()
    options: dict[str, Any] = {}
    if _on_database(url):
        options = {"table": settings.records, "auto_upgrade": False}
    made = Guard(open_store(url, **options), lease=settings.lease, ttl=settings.ttl)
    for scope, policy in settings.scopes.items():
        made.configure_scope(scope, **policy)
    return made


def guard() -> Guard:
    """The Guard ``settings.MIDENG`` describes, the same one every call."""
    if not _made:
        with _making:
            if not _made:
                _made.append(build(config()))
    return _made[0]
