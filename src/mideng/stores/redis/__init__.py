"""The Redis store: standalone Redis, Redis Cluster or a Sentinel-managed master.

- ``store``: ``RedisStore`` (sync and asyncio);
- ``commands``: what it sends and what replies mean;
- ``rows``: a record as a Redis hash and as a reply;
- ``scripts``: the Lua function library from ``lua/``;
- ``connect``: URLs and redis-py clients;
- ``direct``: the probe-free send path;
- ``layout``: the key layout's version per prefix;
- ``batch``, ``steps``, ``survey``: the batch, steps and survey capabilities (one Lua call per
  batch; a steps hash beside each record; a SCAN of every master). ``scan`` is the
  survey's old path, kept for one release.
"""

from mideng.stores.redis.store import RedisStore

__all__ = ["RedisStore"]
