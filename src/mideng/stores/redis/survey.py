"""The Redis store's survey and ``purge_older``: a SCAN of every master, never KEYS.

On a Redis Cluster each master is scanned on its own (its own cursor, its own pipelines), so
every record is seen once whichever node holds it; a standalone or Sentinel-managed server
is one master. For each SCAN reply one pipeline asks each key's fields (without the stored
result and error), its remaining TTL (``PTTL``) and its footprint (``MEMORY USAGE``). Both
are written once, for the sync and the async client. ``purge_older`` deletes a key only
inside a Lua check of its status and time, so a claim made since the scan keeps it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mideng.core import effects
from mideng.core.effects import Effect, Effects, either
from mideng.errors import StoreUnavailableError
from mideng.stores.redis.commands import Commands
from mideng.stores.redis.rows import NAMES, row
from mideng.stores.survey import Survey, SurveyStore, SurveyTerms, Tally, surveyed

BATCH = 500
# The blobs are not read: a field name no record has stands in for each (HMGET says nil).
_READ = tuple("\x00" if name in ("r", "e") else name for name in NAMES)
# Delete a finished record last written at or before ARGV[1] (ARGV[2]: 'processing'-free).
_PURGE_OLDER = """
local s = redis.call('HGET', KEYS[1], 's')
local ua = redis.call('HGET', KEYS[1], 'ua') or ''
-- Layout 2's whole microseconds, or layout 1's seconds.
ua = string.find(ua, '^%d+$') and tonumber(ua) / 1000000 or tonumber(ua)
if (s == 'succeeded' or s == 'failed') and ua and ua <= tonumber(ARGV[1]) then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def pattern(commands: Commands, prefix: str | None) -> str:
    """SCAN MATCH for records whose scope starts with ``prefix`` (all records: None)."""
    whole = commands.pattern(prefix or "")  # "<head>{<escaped scope>:*"
    return whole[: -len(":*")] + "*"


def _queue(pipe: Any, names: list[bytes]) -> None:
    for name in names:
        pipe.hmget(name, _READ)
        pipe.pttl(name)
        pipe.memory_usage(name, samples=0)


def _batch(
    tally: Tally, commands: Commands, names: list[bytes], replies: list[Any], prefix: str | None
) -> None:
    for i, name in enumerate(names):
        values, pttl, size = replies[3 * i : 3 * i + 3]
        identity = commands.identity(name)
        if identity is None or not surveyed(identity[0], prefix):
            continue
        record = row(*identity, values)
        if record is None or pttl == -2:  # gone between the SCAN and the read
            continue
        tally.add(record, None if pttl < 0 else pttl / 1000.0, int(size or 0))


def _masters(client: Any) -> list[Any]:
    """What each master is scanned through: each node of a cluster, or the one server. A
    sync cluster lends a plain client per node; an asyncio one is asked node by node."""
    if not hasattr(client, "get_primaries"):
        return [client]
    if hasattr(client, "get_redis_connection"):
        return [client.get_redis_connection(node) for node in client.get_primaries()]
    return [_AsyncNode(client, node) for node in client.get_primaries()]


class _AsyncNode:
    """One master of an asyncio cluster client, with the calls a scan makes of it."""

    def __init__(self, client: Any, node: Any) -> None:
        self.client = client
        self.node = node

    async def time(self) -> Any:
        return await self.client.time(target_nodes=self.node)

    async def scan(self, cursor: int, **kwargs: Any) -> tuple[int, list[bytes]]:
        # A cluster's SCAN answers with the cursor of each node asked: here just this one.
        cursors, names = await self.client.scan(cursor=cursor, target_nodes=self.node, **kwargs)
        return cursors[self.node.name], names

    def pipeline(self, transaction: bool = False) -> Any:
        return self.client.pipeline(transaction=transaction)


class RedisSurvey(SurveyStore):
    """``RedisStore``'s survey and ``purge_older``, each written once as a procedure of
    effects (mideng.core.effects) over the store's sync or async client: the calls a scan
    makes (TIME, SCAN, a pipeline's EXEC) are the same methods on both kinds of client."""

    commands: Commands
    _errors: tuple[type[BaseException], ...]

    # RedisStore's clients and its one rule for what a driver error becomes.
    def _client(self) -> Any:
        raise NotImplementedError

    async def _aclient(self) -> Any:
        raise NotImplementedError

    def _unavailable(self, exc: BaseException) -> StoreUnavailableError:
        raise NotImplementedError

    def count_records(self, terms: SurveyTerms) -> Survey:
        return effects.run(self._surveying(self._client(), terms))

    async def acount_records(self, terms: SurveyTerms) -> Survey:
        return await effects.arun(self._surveying(await self._aclient(), terms))

    def purge_older(self, age: float, limit: int | None = None) -> int:
        return effects.run(self._purging(self._client(), age, limit))

    async def apurge_older(self, age: float, limit: int | None = None) -> int:
        return await effects.arun(self._purging(await self._aclient(), age, limit))

    def _surveying(self, client: Any, terms: SurveyTerms) -> Effects[Survey]:
        match = pattern(self.commands, terms.prefix)
        found: Survey | None = None
        seen = 0
        try:
            for node in _masters(client):
                sec, usec = yield either(node.time)
                tally = Tally(sec + usec / 1e6, terms.grace, terms.biggest)
                cursor: int | None = None
                while cursor != 0:
                    cursor, names = yield _scan(node, cursor, match)
                    if not names:
                        continue
                    pipe = node.pipeline(transaction=False)
                    _queue(pipe, names)
                    _batch(tally, self.commands, names, (yield either(pipe.execute)), terms.prefix)
                    seen += len(names)
                    if terms.progress is not None:
                        terms.progress(seen)
                found = _add(found, tally.done(), terms.biggest)
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        assert found is not None
        return found

    def _purging(self, client: Any, age: float, limit: int | None) -> Effects[int]:
        match = pattern(self.commands, None)
        gone = 0
        try:
            for node in _masters(client):
                sec, usec = yield either(node.time)
                cutoff = sec + usec / 1e6 - age
                cursor: int | None = None
                while cursor != 0:
                    cursor, pending = yield _scan(node, cursor, match)
                    while pending and (limit is None or gone < limit):
                        # No more candidates than deletions left: ``limit`` is never overshot,
                        # and candidates the script keeps (processing ones) leave room for more.
                        take = pending if limit is None else pending[: limit - gone]
                        pending = pending[len(take) :]
                        pipe = node.pipeline(transaction=False)
                        for name in take:
                            pipe.eval(_PURGE_OLDER, 1, name, repr(cutoff))
                        gone += sum(int(n) for n in (yield either(pipe.execute)))
                    if limit is not None and gone >= limit:
                        return gone
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return gone


def _scan(node: Any, cursor: int | None, match: str) -> Effect[Any]:
    """One SCAN of a master's record hashes, from ``cursor`` (None: the first)."""
    return either(node.scan, cursor or 0, match=match, count=BATCH, _type="hash")


def every_name(client: Any, match: str) -> Effects[list[bytes]]:
    """The name of every hash ``match`` finds, on every master."""
    names: list[bytes] = []
    for node in _masters(client):
        cursor: int | None = None
        while cursor != 0:
            cursor, found = yield _scan(node, cursor, match)
            names += found
    return names


def read_each(
    client: Any, names: list[bytes], queue: Callable[[Any, bytes], None]
) -> Effects[list[Any]]:
    """Every reply of ``queue(pipe, name)`` for each name, in pipelines of ``BATCH`` names."""
    replies: list[Any] = []
    for i in range(0, len(names), BATCH):
        pipe = client.pipeline(transaction=False)
        for name in names[i : i + BATCH]:
            queue(pipe, name)
        replies += yield either(pipe.execute)
    return replies


def _add(found: Survey | None, node: Survey, biggest: int) -> Survey:
    if found is None:
        return node
    found.merge(node, biggest)
    return found
