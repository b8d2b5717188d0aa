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


def _table_options(url: str, records: str) -> dict[str, Any]:
    """The store's options when it keeps its records in a table of the database (whose name
    the setting gives): the tables are the migrations' (``manage.py migrate``), so the store
    never upgrades them, and a server's store never creates them either (the SQLite store
    makes what is absent, as it does for any file)."""
    scheme = scheme_of(url).split("+")[0]
    if scheme == "sqlite":
        return {"table": records, "auto_upgrade": False}
    if scheme in ("postgresql", "postgres", "mysql", "mariadb"):
        return {"table": records, "create_schema": False, "auto_upgrade": False}
    return {}


def build(settings: Config) -> Guard:
    """A Guard on the setting's store, with its scopes configured."""
    url = settings.store_url()
    store = open_store(url, **_table_options(url, settings.records))
    made = Guard(store, lease=settings.lease, ttl=settings.ttl)
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
