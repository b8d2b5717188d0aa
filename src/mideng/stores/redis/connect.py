"""Where a Redis store connects: its URL forms and the redis-py clients for each topology.

``redis://``, ``rediss://`` and ``unix://`` go to redis-py as they are. Cluster and Sentinel
URLs list several seed nodes, which redis-py's URL parser does not know, so they are read here:

    redis+cluster://[user:password@]host:port[,host:port...][?option=value...]
    redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db][?option=value]
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from mideng.errors import ConfigurationError

# Short, so a hung Redis fails a call in seconds instead of stalling every caller behind it.
DEFAULT_TIMEOUT = 2.0
DEFAULT_PORTS = {"cluster": 6379, "sentinel": 26379}
# Options that belong to the store, not to redis-py.
STORE_OPTIONS = ("prefix", "retries")
# Typed readers for options given in a cluster or sentinel URL's query string.
_QUERY_TYPES: dict[str, type] = {
    "socket_timeout": float,
    "socket_connect_timeout": float,
    "max_connections": int,
    "health_check_interval": float,
    "retries": int,
    "db": int,
}


@dataclass(frozen=True)
class Target:
    kind: str  # "standalone" | "cluster" | "sentinel"
    url: str = ""  # standalone: the URL for redis-py, without the store's own options
    nodes: tuple[tuple[str, int], ...] = ()
    service: str = ""
    ssl: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)
    sentinel_kwargs: dict[str, Any] = field(default_factory=dict)


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    user, _, hosts = parts.netloc.rpartition("@")
    name = user.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{name}:***@{hosts}" if name else f"***@{hosts}"))


def parse(url: str, options: dict[str, Any]) -> tuple[Target, dict[str, Any]]:
    """Split a URL plus keyword options into where to connect and the store's own options."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    query = dict(parse_qsl(parts.query))
    own: dict[str, Any] = {name: query.pop(name) for name in STORE_OPTIONS if name in query}
    own.update({name: options.pop(name) for name in STORE_OPTIONS if name in options})
    if "retries" in own:
        own["retries"] = int(own["retries"])
    kwargs: dict[str, Any] = {
        "socket_timeout": DEFAULT_TIMEOUT,
        "socket_connect_timeout": DEFAULT_TIMEOUT,
    }
    database = unquote(parts.path).strip("/")
    if scheme in ("redis", "rediss") and database and not database.isdigit():
        # redis-py reads the path as the database number and, when it is none, silently
        # uses database 0: records looked for in one database would be found in another.
        raise ConfigurationError(f"a Redis URL's path is a database number: {redact(url)}")
    if scheme in ("redis", "rediss", "unix"):
        # Only the query changes; urlunsplit would also drop the empty host of unix:///path.
        bare = url.partition("?")[0] + (f"?{urlencode(query)}" if query else "")
        return Target("standalone", url=bare, kwargs={**kwargs, **options}), own
    kind = {
        "redis+cluster": "cluster",
        "rediss+cluster": "cluster",
        "redis+sentinel": "sentinel",
    }.get(scheme)
    if kind is None:
        raise ConfigurationError(f"not a Redis URL: {redact(url)}")
    user, _, hosts = parts.netloc.rpartition("@")
    if user:
        name, _, password = user.partition(":")
        kwargs.update({"username": unquote(name) or None, "password": unquote(password) or None})
    sentinel_kwargs = {}
    for name, value in query.items():
        typed = _QUERY_TYPES.get(name, str)(value)
        if name.startswith("sentinel_"):
            sentinel_kwargs[name.removeprefix("sentinel_")] = typed
        else:
            kwargs[name] = typed
    kwargs.update(options)
    nodes = tuple(_node(h, DEFAULT_PORTS[kind], url) for h in hosts.split(",") if h)
    if not nodes:
        raise ConfigurationError(f"{scheme} URL names no nodes: {redact(url)}")
    if kind == "cluster":
        if parts.path.strip("/"):
            raise ConfigurationError(f"a cluster has no databases; drop the path: {redact(url)}")
        return Target(kind, nodes=nodes, ssl=scheme.startswith("rediss"), kwargs=kwargs), own
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path or len(path) > 2:
        raise ConfigurationError(
            f"sentinel URL needs /service_name[/db] after the sentinels: {redact(url)}"
        )
    if len(path) == 2:
        kwargs["db"] = int(path[1])
    for name in ("socket_timeout", "socket_connect_timeout"):
        sentinel_kwargs.setdefault(name, kwargs[name])
    return Target(
        kind, nodes=nodes, service=path[0], kwargs=kwargs, sentinel_kwargs=sentinel_kwargs
    ), own


def _node(text: str, default_port: int, url: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":") if not text.endswith("]") else (text, "", "")
    if not sep:
        host, port = text, str(default_port)
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise ConfigurationError(f"bad node {text!r} in {redact(url)}")
    return host, int(port)


class Connection:
    """One redis-py client (plus the Sentinel clients behind it), sync or asyncio."""

    def __init__(self, client: Any, helpers: list[Any]) -> None:
        self.client = client
        self._helpers = helpers
        # The store's probe-free path to the server (see direct), where the topology allows one.
        self.direct: Any = None

    def close(self) -> None:
        if self.direct is not None:
            self.direct.close()
        for c in (self.client, *self._helpers):
            c.close()

    async def aclose(self) -> None:
        if self.direct is not None:
            await self.direct.aclose()
        for c in (self.client, *self._helpers):
            await c.aclose()

    def close_from_outside(self, loop: asyncio.AbstractEventLoop) -> None:
        """Close an asyncio client from a sync caller, on the loop it belongs to if it can."""
        if loop.is_closed():
            return
        with contextlib.suppress(Exception):
            if not loop.is_running():
                loop.run_until_complete(self.aclose())
            elif _running_loop() is not loop:
                asyncio.run_coroutine_threadsafe(self.aclose(), loop).result(DEFAULT_TIMEOUT)
            else:
                loop.create_task(self.aclose())


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def connect(redis: Any, target: Target, retries: int, *, asynchronous: bool) -> Connection:
    """A client for ``target``; redis-py connects on first use (a cluster on creation)."""
    mod = redis.asyncio if asynchronous else redis
    retry_mod = redis.asyncio.retry if asynchronous else redis.retry
    # Retrying a script whose reply was lost would run it twice: a claim would then answer its
    # own caller "in progress". So the driver does not retry unless asked to.
    retry = retry_mod.Retry(redis.backoff.ExponentialBackoff(cap=0.5, base=0.01), retries)
    kwargs = {**target.kwargs, "retry": retry}
    if target.kind == "standalone":
        return Connection(mod.Redis.from_url(target.url, **kwargs), [])
    if target.kind == "cluster":
        cluster = mod.cluster
        nodes = [cluster.ClusterNode(host, port) for host, port in target.nodes]
        return Connection(cluster.RedisCluster(startup_nodes=nodes, ssl=target.ssl, **kwargs), [])
    sentinel = mod.sentinel.Sentinel(list(target.nodes), sentinel_kwargs=target.sentinel_kwargs)
    master = sentinel.master_for(target.service, **kwargs)
    return Connection(master, list(sentinel.sentinels))
