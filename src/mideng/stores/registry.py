"""``open_store(url)``: one registry keyed by URL scheme; each backend is imported lazily.

A missing driver is reported with the extra that installs it, never as a bare ImportError from
deep inside a backend.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any
from urllib.parse import SplitResult, urlsplit

from mideng.core.keys import utf8_error
from mideng.errors import ConfigurationError, IdempotencyError
from mideng.stores.base import Store

# scheme -> "module:factory". Factories take (url, **options).
_BACKENDS: dict[str, str] = {
    "memory": "mideng.stores.memory:MemoryStore.from_url",
    "sqlite": "mideng.stores.sqlite.store:SQLiteStore.from_url",
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


def load(target: str) -> Any:
    """The object a lazy ``"module:attr"`` string names (the module imported on first use)."""
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
    factory: Callable[..., Store] = load(target)
    _FACTORIES[scheme] = factory
    return factory


def open_store(url: str, *, durable: str | Store | None = None, **options: Any) -> Store:
    """Open a store from a URL: ``memory://``, ``sqlite:///path.db`` and the server schemes.
    ``durable=<url or Store>`` puts the (Redis) store the URL opens in front of that store.

    A URL or option no store could use is a ConfigurationError, raised before any connection
    where the URL alone shows it."""
    scheme = scheme_of(url)
    factory = _factory(scheme)
    try:
        store = factory(url, **options)
    except IdempotencyError:
        raise
    except (ValueError, TypeError) as exc:
        # A store reading its URL's parts and options with int(), float() or its own
        # constructor: what it can't read is the URL's fault, reported as one, whatever store.
        # The URL is left out of the message: it may hold a password.
        raise ConfigurationError(
            f"the {scheme} store refused its URL or options: {type(exc).__name__}: {exc}"
        ) from exc
    return store if durable is None else in_front(store, durable)


def scheme_of(url: object) -> str:
    """The scheme of a URL every store could read: text (no byte a strict UTF-8 decode would
    have refused) and, where it names one host, a port and a host name that could be reached.
    Found later, at the first connection, each would be a driver's error, different on every
    store (on Redis, an exception no store error wraps)."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"store URL must look like scheme://..., got {url!r}")
    error = utf8_error(url)
    if error is not None:
        raise ConfigurationError(
            f"store URL holds a byte that is not UTF-8 (character {error.start}); "
            "give it as text, percent-encoded where it is no character"
        ) from error
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed [ of an IPv6 address
        raise ConfigurationError(f"store URL refused: {exc}") from exc
    if _one_host(parts.netloc):
        _check_host(parts)
    return parts.scheme.lower()


def _one_host(netloc: str) -> bool:
    """Whether a URL names one host, not a list (``host1:7000,host2:7000``: a Redis cluster's
    or sentinels' nodes, which urlsplit can't read and the Redis store checks itself)."""
    return "," not in netloc.rpartition("@")[2]


def _check_host(parts: SplitResult) -> None:
    """A port that is a number from 0 to 65535, a host name that can be looked up (no empty
    label, none over 63 characters)."""
    try:
        parts.port  # noqa: B018 - reading it checks it
    except ValueError as exc:
        raise ConfigurationError(f"store URL refused: {exc}") from exc
    if parts.hostname:
        try:
            parts.hostname.encode("idna")  # what the resolver is given
        except UnicodeError as exc:
            reason = exc.__cause__ or exc
            raise ConfigurationError(
                f"store URL's host {parts.hostname!r} is no host name: {reason}"
            ) from exc


# A fast store in front of a durable one. Built here, above both, so that neither the Redis
# store nor the hybrid has to know the other's module to be opened by one URL.
_IN_FRONT = "mideng.stores.hybrid.batch:HybridBatch.in_front_of"


def in_front(fast: Store, durable: str | Store) -> Store:
    """``fast`` answering duplicates in front of ``durable`` (a store, or its URL)."""
    compose: Callable[[Store, Store], Store] = load(_IN_FRONT)
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
