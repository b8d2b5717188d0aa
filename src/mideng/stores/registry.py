"""``open_store(url)``: one registry keyed by URL scheme; each backend is imported lazily.

A missing driver is reported with the extra that installs it, never as a bare ImportError from
deep inside a backend.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from mideng.errors import ConfigurationError
from mideng.stores.base import Store

# scheme -> "module:factory". Factories take (url, **options).
_BACKENDS: dict[str, str] = {
    "memory": "mideng.stores.memory:MemoryStore.from_url",
    "sqlite": "mideng.stores.sqlite:SQLiteStore.from_url",
}
_FACTORIES: dict[str, Callable[..., Store]] = {}


def register_store(scheme: str, factory: str | Callable[..., Store]) -> None:
    """Map a URL scheme to a factory, or to ``"module:attr"`` imported on first use."""
    if callable(factory):
        _FACTORIES[scheme] = factory
    else:
        _BACKENDS[scheme] = factory


def schemes() -> list[str]:
    return sorted(set(_BACKENDS) | set(_FACTORIES))


def _load(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _factory(scheme: str) -> Callable[..., Store]:
    if scheme in _FACTORIES:
        return _FACTORIES[scheme]
    target = _BACKENDS.get(scheme)
    if target is None:
        raise ConfigurationError(f"no store for scheme {scheme!r}; known: {', '.join(schemes())}")
    factory: Callable[..., Store] = _load(target)
    _FACTORIES[scheme] = factory
    return factory


def open_store(url: str, *, durable: str | Store | None = None, **options: Any) -> Store:
    """Open a store from a URL: ``memory://``, ``sqlite:///path.db`` and the server schemes.
    ``durable=<url or Store>`` puts the (Redis) store the URL opens in front of that store."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"store URL must look like scheme://..., got {url!r}")
    scheme = urlsplit(url).scheme.lower()
    store = _factory(scheme)(url, **options)
    return store if durable is None else in_front(store, durable)


# A fast store in front of a durable one. Built here, above both, so that neither the Redis
# store nor the hybrid has to know the other's module to be opened by one URL.
_IN_FRONT = "mideng.stores.hybrid_batch:HybridBatch.in_front_of"


def in_front(fast: Store, durable: str | Store) -> Store:
    """``fast`` answering duplicates in front of ``durable`` (a store, or its URL)."""
    compose: Callable[[Store, Store], Store] = _load(_IN_FRONT)
    return compose(fast, open_store(durable) if isinstance(durable, str) else durable)


def require(module: str, extra: str) -> Any:
    """Import an optional driver or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(
            f"{module} is not installed; pip install 'mideng[{extra}]'"
        ) from exc


# Server stores; each module imports its driver on first use.
for _scheme in (
    "postgresql",
    "postgresql+psycopg",
    "postgres",
    "mysql",
    "mysql+pymysql",
    "mariadb",
    "mariadb+pymysql",
):
    _BACKENDS[_scheme] = "mideng.stores.sql.store:SQLStore.from_url"
for _scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "unix"):
    _BACKENDS[_scheme] = "mideng.stores.redis.store:RedisStore.from_url"
