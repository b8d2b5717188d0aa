"""The Redis store's survey and ``purge_older``: a SCAN of every master, never KEYS.

On a Redis Cluster each master is scanned on its own (its own cursor, its own pipelines), so
every record is seen once whichever node holds it; a standalone or Sentinel-managed server
is one master. Per batch of keys one pipeline asks each key's fields (without the stored
result and error), its remaining TTL (``PTTL``) and its footprint (``MEMORY USAGE``). What a
batch means is decided once, in ``_batch``, for both loops. ``purge_older`` deletes a key
only inside a Lua check of its status and time, so a claim made since the scan keeps it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from mideng.stores.redis.commands import Commands
from mideng.stores.redis.rows import NAMES, row
from mideng.stores.survey import Progress, Survey, SurveyStore, Tally, surveyed

BATCH = 500
# The blobs are not read: a field name no record has stands in for each (HMGET says nil).
_READ = tuple("\x00" if name in ("r", "e") else name for name in NAMES)
# Delete a finished record last written at or before ARGV[1] (ARGV[2]: 'processing'-free).
_PURGE_OLDER = """
local s = redis.call('HGET', KEYS[1], 's')
local ua = tonumber(redis.call('HGET', KEYS[1], 'ua') or '')
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
    """A plain client per master: each node of a cluster, or the one server."""
    if hasattr(client, "get_primaries"):
        return [client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


def _chunks(names: Iterator[bytes]) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for name in names:
        chunk.append(name)
        if len(chunk) == BATCH:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


async def _achunks(names: AsyncIterator[bytes]) -> AsyncIterator[list[bytes]]:
    chunk: list[bytes] = []
    async for name in names:
        chunk.append(name)
        if len(chunk) == BATCH:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class RedisSurvey(SurveyStore):
    """``RedisStore``'s survey, sync and async, over its own clients."""

    commands: Commands
    _errors: tuple[type[BaseException], ...]

    # RedisStore's clients and its one rule for what a driver error becomes.
    def _scan_client(self) -> Any:
        own: Any = self
        return own._client()

    async def _ascan_client(self) -> Any:
        own: Any = self
        return await own._aclient()

    def _scan_error(self, exc: BaseException) -> Exception:
        own: Any = self
        failure: Exception = own._unavailable(exc)
        return failure

    def survey(
        self,
        prefix: str | None = None,
        *,
        grace: float = 60.0,
        biggest: int = 10,
        progress: Progress = None,
    ) -> Survey:
        client = self._scan_client()
        match = pattern(self.commands, prefix)
        found: Survey | None = None
        seen = 0
        try:
            masters = _masters(client)
            for node in masters:
                sec, usec = node.time()
                tally = Tally(sec + usec / 1e6, grace, biggest)
                for names in _chunks(node.scan_iter(match=match, count=BATCH, _type="hash")):
                    pipe = node.pipeline(transaction=False)
                    _queue(pipe, names)
                    _batch(tally, self.commands, names, pipe.execute(), prefix)
                    seen += len(names)
                    if progress is not None:
                        progress(seen)
                found = _add(found, tally.done(), biggest)
        except self._errors as exc:
            raise self._scan_error(exc) from exc
        assert found is not None
        return found

    async def asurvey(
        self,
        prefix: str | None = None,
        *,
        grace: float = 60.0,
        biggest: int = 10,
        progress: Progress = None,
    ) -> Survey:
        client = await self._ascan_client()
        match = pattern(self.commands, prefix)
        found: Survey | None = None
        seen = 0
        try:
            for node in await _amasters(client):
                sec, usec = await node.time()
                tally = Tally(sec + usec / 1e6, grace, biggest)
                names_iter = node.scan_iter(match=match, count=BATCH, _type="hash")
                async for names in _achunks(names_iter):
                    pipe = node.pipeline(transaction=False)
                    _queue(pipe, names)
                    _batch(tally, self.commands, names, await pipe.execute(), prefix)
                    seen += len(names)
                    if progress is not None:
                        progress(seen)
                found = _add(found, tally.done(), biggest)
        except self._errors as exc:
            raise self._scan_error(exc) from exc
        assert found is not None
        return found

    def purge_older(self, age: float, limit: int | None = None) -> int:
        client = self._scan_client()
        match = pattern(self.commands, None)
        gone = 0
        try:
            for node in _masters(client):
                sec, usec = node.time()
                cutoff = sec + usec / 1e6 - age
                for names in _chunks(node.scan_iter(match=match, count=BATCH, _type="hash")):
                    pending = names
                    while pending and (limit is None or gone < limit):
                        # No more candidates than deletions left: ``limit`` is never overshot,
                        # and candidates the script keeps (processing ones) leave room for more.
                        take = pending if limit is None else pending[: limit - gone]
                        pending = pending[len(take) :]
                        pipe = node.pipeline(transaction=False)
                        for name in take:
                            pipe.eval(_PURGE_OLDER, 1, name, repr(cutoff))
                        gone += sum(int(n) for n in pipe.execute())
                    if limit is not None and gone >= limit:
                        return gone
        except self._errors as exc:
            raise self._scan_error(exc) from exc
        return gone

    async def apurge_older(self, age: float, limit: int | None = None) -> int:
        client = await self._ascan_client()
        match = pattern(self.commands, None)
        gone = 0
        try:
            for node in await _amasters(client):
                sec, usec = await node.time()
                cutoff = sec + usec / 1e6 - age
                names_iter = node.scan_iter(match=match, count=BATCH, _type="hash")
                async for names in _achunks(names_iter):
                    pending = names
                    while pending and (limit is None or gone < limit):
                        # No more candidates than deletions left: ``limit`` is never overshot,
                        # and candidates the script keeps (processing ones) leave room for more.
                        take = pending if limit is None else pending[: limit - gone]
                        pending = pending[len(take) :]
                        pipe = node.pipeline(transaction=False)
                        for name in take:
                            pipe.eval(_PURGE_OLDER, 1, name, repr(cutoff))
                        gone += sum(int(n) for n in await pipe.execute())
                    if limit is not None and gone >= limit:
                        return gone
        except self._errors as exc:
            raise self._scan_error(exc) from exc
        return gone


async def _amasters(client: Any) -> list[Any]:
    if hasattr(client, "get_primaries"):
        return [_AsyncNode(client, node) for node in client.get_primaries()]
    return [client]


class _AsyncNode:
    """One master of an asyncio cluster client, with the calls a survey makes of it."""

    def __init__(self, client: Any, node: Any) -> None:
        self.client = client
        self.node = node

    async def time(self) -> Any:
        return await self.client.time(target_nodes=self.node)

    async def scan_iter(self, **kwargs: Any) -> AsyncIterator[bytes]:
        cursor = None
        while cursor != 0:
            # A cluster's SCAN answers with the cursor of each node asked: here just this one.
            cursors, names = await self.client.scan(
                cursor=cursor or 0, target_nodes=self.node, **kwargs
            )
            cursor = cursors[self.node.name]
            for name in names:
                yield name

    def pipeline(self, transaction: bool = False) -> Any:
        return self.client.pipeline(transaction=transaction)


def _add(found: Survey | None, node: Survey, biggest: int) -> Survey:
    if found is None:
        return node
    found.merge(node, biggest)
    return found
