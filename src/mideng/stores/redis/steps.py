"""The steps capability on Redis: one hash per operation beside its record.

``{prefix}:steps:{scope:key}`` shares the record's hash tag (one cluster slot), so recording a
step is one Lua call that checks the claim on the record and writes the step atomically
(``lua/record_step.lua``), and resuming is one call that keeps the arguments and answers
every recorded step (``lua/begin_steps.lua``). The hash has no expiry: an operation that never
finishes stays listed until it is run to its end (or forgotten), and ``clear_steps`` deletes
it once the operation's record has completed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from mideng.core import effects
from mideng.core.effects import Effects
from mideng.core.record import Record, Status
from mideng.stores.redis.commands import Command, Commands
from mideng.stores.redis.rows import instant, joined, row
from mideng.stores.redis.survey import every_name, read_each
from mideng.stores.steps import (
    ARGUMENTS,
    Finished,
    OperationEntry,
    OperationPosition,
    StepStore,
    order_of,
    page_of,
    step_lost,
)


def _entry(value: bytes) -> tuple[float, str, bytes]:
    """(recorded at, codec, result) from a steps-hash value ``at|#codec|codec result``."""
    at, _, rest = value.partition(b"|")
    size, _, rest = rest.partition(b"|")
    n = int(size)
    return instant(at), rest[:n].decode(), rest[n:]


def _pairs(flat: Sequence[bytes]) -> list[tuple[str, bytes]]:
    return [(flat[i].decode(), flat[i + 1]) for i in range(0, len(flat), 2)]


class StepCommands:
    """The steps' commands for one key prefix (no I/O: both loops run them)."""

    def __init__(self, records: Commands) -> None:
        self.records = records
        self.hashes = Commands(f"{records.prefix}:steps", records.scripts)

    def begin(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> Command[dict[str, Finished] | None]:
        def finish(reply: Any) -> dict[str, Finished] | None:
            if reply is None:
                return None
            found = {}
            for name, value in _pairs(reply):
                if name != ARGUMENTS:
                    _, step_codec, result = _entry(value)
                    found[name] = Finished(result, step_codec)
            return found

        keys = (self.records.key(scope, key), self.hashes.key(scope, key))
        return Command((*keys, owner, arguments, codec), finish, self.records.scripts.begin_steps)

    def record(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> Command[bool]:
        keys = (self.records.key(scope, key), self.hashes.key(scope, key))
        args = (*keys, owner, step, result, codec)
        return Command(args, lambda reply: int(reply) == 1, self.records.scripts.record_step)

    def clear(self, scope: str, key: str) -> Command[None]:
        return Command(("DEL", self.hashes.key(scope, key)), lambda reply: None)

    def entries(
        self, names: list[bytes], hashes: list[Any], records: list[Any], limit: int
    ) -> list[OperationEntry]:
        found = []
        for name, flat, fields in zip(names, hashes, records, strict=True):
            identity = self.hashes.identity(name)
            if identity is None or not flat:
                continue
            scope, key = identity
            record = row(scope, key, joined(fields))
            entry = OperationEntry(scope, key, None, None, 0.0, record=record)
            done = []
            pairs = (
                flat.items() if isinstance(flat, dict) else zip(flat[::2], flat[1::2], strict=True)
            )
            for raw_name, value in pairs:
                at, codec, result = _entry(value)
                step = raw_name.decode()
                if step == ARGUMENTS:
                    entry.arguments, entry.codec, entry.started_at = result, codec, at
                else:
                    done.append((at, step))
            entry.steps = [step for _, step in sorted(done)]
            if entry.arguments is None and done:
                entry.started_at = min(done)[0]
            found.append(entry)
        return sorted(found, key=order_of)[:limit]

    def running(
        self, names: list[bytes], records: list[Any], scope: str | None, limit: int
    ) -> list[Record]:
        found = []
        for name, fields in zip(names, records, strict=True):
            identity = self.records.identity(name)
            record = None if identity is None else row(*identity, joined(fields))
            if record is None or (scope is not None and record.scope != scope):
                continue
            if record.status is Status.PROCESSING:
                found.append(record)
        return sorted(found, key=lambda r: r.created_at)[:limit]


class RedisSteps(StepStore):
    """The capability on RedisStore: each write one Lua call, each view a SCAN."""

    steps: StepCommands
    commands: Commands
    _errors: tuple[type[BaseException], ...]

    # RedisStore's own: running a Command, its clients, its error mapping, its get.
    _run: Callable[[Command[Any]], Any]
    _arun: Callable[[Command[Any]], Awaitable[Any]]
    _client: Callable[[], Any]
    _aclient: Callable[[], Awaitable[Any]]
    _unavailable: Callable[[BaseException], Exception]
    get: Callable[[str, str], Record | None]
    aget: Callable[[str, str], Awaitable[Record | None]]

    def begin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        found = self._run(self.steps.begin(scope, key, owner, arguments, codec))
        if found is None:
            raise step_lost(scope, key, owner, self.get(scope, key))
        return found  # type: ignore[no-any-return]

    def record_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        if not self._run(self.steps.record(scope, key, owner, step, result, codec)):
            raise step_lost(scope, key, owner, self.get(scope, key))

    def clear_steps(self, scope: str, key: str) -> None:
        self._run(self.steps.clear(scope, key))

    def operations(
        self, scope: str | None = None, limit: int = 100, after: OperationPosition | None = None
    ) -> list[OperationEntry]:
        return effects.run(self._operations(self._client(), scope, limit, after))

    def operation(self, scope: str, key: str) -> OperationEntry | None:
        return effects.run(self._operation(self._client(), scope, key))

    def running(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return effects.run(self._running(self._client(), scope, limit))

    async def abegin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        found = await self._arun(self.steps.begin(scope, key, owner, arguments, codec))
        if found is None:
            raise step_lost(scope, key, owner, await self.aget(scope, key))
        return found  # type: ignore[no-any-return]

    async def arecord_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        if not await self._arun(self.steps.record(scope, key, owner, step, result, codec)):
            raise step_lost(scope, key, owner, await self.aget(scope, key))

    async def aclear_steps(self, scope: str, key: str) -> None:
        await self._arun(self.steps.clear(scope, key))

    async def aoperations(
        self, scope: str | None = None, limit: int = 100, after: OperationPosition | None = None
    ) -> list[OperationEntry]:
        client = await self._aclient()
        return await effects.arun(self._operations(client, scope, limit, after))

    async def aoperation(self, scope: str, key: str) -> OperationEntry | None:
        return await effects.arun(self._operation(await self._aclient(), scope, key))

    async def arunning(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return await effects.arun(self._running(await self._aclient(), scope, limit))

    # -- the views, each a SCAN and pipelined reads, written once ----------------------------
    def _operations(
        self, client: Any, scope: str | None, limit: int, after: OperationPosition | None
    ) -> Effects[list[OperationEntry]]:
        try:
            names = yield from every_name(client, self.steps.hashes.pattern(scope))
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        # Every operation is read (a SCAN has no order): the page is chosen among them.
        found = yield from self._entries(client, names, len(names))
        return page_of(found, after, limit)

    def _operation(self, client: Any, scope: str, key: str) -> Effects[OperationEntry | None]:
        name = self.steps.hashes.key(scope, key).encode()
        found = yield from self._entries(client, [name], 1)
        return found[0] if found else None

    def _entries(
        self, client: Any, names: list[bytes], limit: int
    ) -> Effects[list[OperationEntry]]:
        """The operations kept under ``names`` (steps hashes), with their records."""
        steps = self.steps

        def both(pipe: Any, name: bytes) -> None:  # the steps hash, and its record's fields
            identity = steps.hashes.identity(name)
            pipe.hgetall(name)
            fields(pipe, self.commands.key(*identity).encode() if identity else name)

        try:
            replies = yield from read_each(client, names, both)
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return steps.entries(names, replies[::2], replies[1::2], limit)

    def _running(self, client: Any, scope: str | None, limit: int) -> Effects[list[Record]]:
        try:
            names = yield from every_name(client, self.commands.pattern(scope))
            records = yield from read_each(client, names, fields)
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return self.steps.running(names, records, scope, limit)


def fields(pipe: Any, name: bytes) -> None:
    """A record's fields, for ``row(scope, key, joined(reply))``: all of them, so a value cut
    in pieces comes with its pieces."""
    pipe.hgetall(name)
