"""The batch capability on Redis: a batch's commands in one pipeline, one round trip.

Each claim and completion stays its own Lua call, atomic on its own key, exactly the single
operation; the pipeline only saves the round trips. Keys of different records hash to
different cluster slots, so one script over a whole batch could not run on a cluster; there
the commands go one by one through the store's own path, which routes each to its slot.
A server that lacks the library (or the scripts) is loaded once and the batch sent again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mideng.errors import LeaseLostError
from mideng.stores.redis.commands import Command
from mideng.stores.redis.direct import pack


def forms(store: Any, commands: Sequence[Command[Any]]) -> list[tuple[Any, ...]]:
    return [store._calls.form(c.script, c.args) for c in commands]


def _missing(replies: list[Any]) -> BaseException | None:
    for reply in replies:
        if isinstance(reply, BaseException):
            return reply
    return None


def finish_all(commands: Sequence[Command[Any]], replies: list[Any]) -> list[Any]:
    """Each reply's answer; a lost claim's LeaseLostError is the answer, not raised."""
    out: list[Any] = []
    for command, reply in zip(commands, replies, strict=True):
        try:
            out.append(command.finish(reply))
        except LeaseLostError as exc:
            out.append(exc)
    return out


def run_many(store: Any, commands: Sequence[Command[Any]]) -> list[Any]:
    if not commands:
        return []
    if store._target.kind == "cluster":
        return [_one(store, c) for c in commands]
    try:
        conn = store._connection()
        replies = _pipeline(conn, forms(store, commands))
        error = _missing(replies)
        if error is not None:
            for load in store._calls.loads(error):
                conn.client.execute_command(*load)
            replies = _pipeline(conn, forms(store, commands))
            error = _missing(replies)
            if error is not None:
                raise error
    except store._errors as exc:
        raise store._unavailable(exc) from exc
    return finish_all(commands, replies)


async def arun_many(store: Any, commands: Sequence[Command[Any]]) -> list[Any]:
    if not commands:
        return []
    if store._target.kind == "cluster":
        return [await _aone(store, c) for c in commands]
    try:
        conn = await store._aconnection()
        replies = await _apipeline(conn, forms(store, commands))
        error = _missing(replies)
        if error is not None:
            for load in store._calls.loads(error):
                await conn.client.execute_command(*load)
            replies = await _apipeline(conn, forms(store, commands))
            error = _missing(replies)
            if error is not None:
                raise error
    except store._errors as exc:
        raise store._unavailable(exc) from exc
    return finish_all(commands, replies)


# Through the store's direct sender where it has one (the same probe-free path its single
# operations take), else a redis-py pipeline.
def _pipeline(conn: Any, sends: list[tuple[Any, ...]]) -> list[Any]:
    if conn.direct is not None:
        return conn.direct.call_many([pack(args) for args in sends])  # type: ignore[no-any-return]
    pipe = conn.client.pipeline(transaction=False)
    for args in sends:
        pipe.execute_command(*args)
    return list(pipe.execute(raise_on_error=False))


async def _apipeline(conn: Any, sends: list[tuple[Any, ...]]) -> list[Any]:
    if conn.direct is not None:
        return await conn.direct.call_many([pack(args) for args in sends])  # type: ignore[no-any-return]
    pipe = conn.client.pipeline(transaction=False)
    for args in sends:
        pipe.execute_command(*args)
    return list(await pipe.execute(raise_on_error=False))


def _one(store: Any, command: Command[Any]) -> Any:
    try:
        return store._run(command)
    except LeaseLostError as exc:
        return exc


async def _aone(store: Any, command: Command[Any]) -> Any:
    try:
        return await store._arun(command)
    except LeaseLostError as exc:
        return exc
