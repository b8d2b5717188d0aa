"""``settings.MIDENG``: what the app reads, checked once at start-up.

    MIDENG = {
        "database": "default",                # the alias whose database holds mideng's tables
        "store": "redis://127.0.0.1:6379/0",  # optional: else the database above, as a URL
        "records": "mideng_records",          # the record table (its steps: <records>_steps)
        "outbox": "mideng_outbox",            # the outbox table (its keys: <outbox>_keys)
        "broker": "amqp://guest:guest@127.0.0.1/",   # where mideng_relay publishes
        "lease": 60, "ttl": 86400,            # the Guard's defaults
        "scopes": {"charge": {"on_expiry": "unknown"}},  # configure_scope's options, per scope
    }

Every key is optional. An unknown key, or a value of the wrong type, is one
``ImproperlyConfigured`` naming it. Whether the alias exists and the store URL opens is for
the system checks (``mideng.contrib.django.checks``), which report rather than stop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from mideng.core.policy import Policy
from mideng.errors import ConfigurationError
from mideng.schema.tables import DEFAULT_NAMES, OUTBOX, RECORDS

SETTING = "MIDENG"
_TEXT = (str,)
_SECONDS = (int, float)
#: key -> the types its value may have (None: may be None too).
_TYPES: dict[str, tuple[type, ...]] = {
    "store": _TEXT,
    "database": _TEXT,
    "records": _TEXT,
    "outbox": _TEXT,
    "broker": _TEXT,
    "lease": _SECONDS,
    "ttl": (*_SECONDS, type(None)),
    "scopes": (dict,),
}
#: Django's database engines and the store URL scheme of each.
_SCHEMES = {
    "django.db.backends.postgresql": "postgresql",
    "django.db.backends.mysql": "mysql",
    "django.db.backends.sqlite3": "sqlite",
}


@dataclass(frozen=True)
class Config:
    """``settings.MIDENG``, checked, with the defaults filled in."""

    database: str = "default"
    store: str | None = None
    records: str = DEFAULT_NAMES[RECORDS]
    outbox: str = DEFAULT_NAMES[OUTBOX]
    broker: str | None = None
    lease: float = 60.0
    ttl: float | None = 86400.0
    scopes: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def external_scopes(self) -> list[str]:
        """The scopes declared with external effects (a lapsed lease is UNKNOWN)."""
        return [name for name, options in self.scopes.items() if _external(options)]

    def store_url(self) -> str:
        """The store's URL: ``store``, else the ``database`` alias's database as one (so
        its credentials are written once, in DATABASES)."""
        if self.store is not None:
            return self.store
        return database_url(self.database)


def _external(options: Mapping[str, Any]) -> bool:
    return str(options.get("on_expiry", "")).lower() == "unknown"


def _wrong(*path: str, why: str) -> ImproperlyConfigured:
    """What is wrong with the value at ``path`` (keys, outermost first)."""
    where = "".join(f"[{key!r}]" for key in path)
    return ImproperlyConfigured(f"settings.{SETTING}{where} {why}")


def _scopes(value: dict[Any, Any]) -> dict[str, dict[str, Any]]:
    """Each scope's options, checked as ``configure_scope`` would take them."""
    for scope, options in value.items():
        if not isinstance(scope, str) or not isinstance(options, dict):
            raise _wrong("scopes", why="must map a scope's name to a dict of its options")
        try:
            Policy().merged(**options)
        except (ConfigurationError, TypeError, ValueError) as exc:
            raise _wrong("scopes", scope, why=f"is refused: {exc}") from exc
    return value


def parse(raw: object) -> Config:
    """``raw`` (the setting's value) as a ``Config``, or one ImproperlyConfigured naming the
    first key that is wrong."""
    if raw is None:
        return Config()
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(f"settings.{SETTING} must be a dict, not {type(raw).__name__}")
    for key, value in raw.items():
        if key not in _TYPES:
            raise ImproperlyConfigured(
                f"settings.{SETTING} has an unknown key {key!r}; known: {', '.join(sorted(_TYPES))}"
            )
        wanted = _TYPES[key]
        if not isinstance(value, wanted) or isinstance(value, bool):
            names = " or ".join("None" if t is type(None) else t.__name__ for t in wanted)
            raise _wrong(key, why=f"must be {names}, not {type(value).__name__}")
        if isinstance(value, _SECONDS) and value <= 0:
            raise _wrong(key, why=f"must be a positive number of seconds, not {value!r}")
    return Config(**{**raw, "scopes": _scopes(raw.get("scopes", {}))})


def config() -> Config:
    """``settings.MIDENG`` as a checked ``Config``."""
    return parse(getattr(settings, SETTING, None))


def database_url(alias: str) -> str:
    """The store URL of the database ``alias`` names in DATABASES."""
    entry = settings.DATABASES.get(alias)
    if entry is None:
        raise ImproperlyConfigured(
            f"settings.{SETTING}['database'] is {alias!r}, which is not in settings.DATABASES"
        )
    return url_of(alias, entry)


def url_of(alias: str, entry: Mapping[str, Any]) -> str:
    """A DATABASES entry as a store URL: its engine's scheme, user and password (quoted),
    host, port and name. OPTIONS are not carried: name a ``store`` when the database needs
    them."""
    engine = entry.get("ENGINE", "")
    scheme = _SCHEMES.get(engine)
    if scheme is None:
        raise ImproperlyConfigured(
            f"the database {alias!r} uses {engine!r}, which mideng has no store for "
            f"(it has {', '.join(sorted(_SCHEMES))}); set settings.{SETTING}['store']"
        )
    name = str(entry.get("NAME") or "")
    if scheme == "sqlite":
        return f"sqlite:///{name}"
    user = quote(str(entry.get("USER") or ""), safe="")
    password = quote(str(entry.get("PASSWORD") or ""), safe="")
    login = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = str(entry.get("HOST") or "")
    port = f":{entry['PORT']}" if entry.get("PORT") else ""
    return f"{scheme}://{login}{host}{port}/{quote(name, safe='')}"
