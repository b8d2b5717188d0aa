"""The batch capability on Redis: a whole batch in one Lua call, one round trip.

A batch claim is one claim_many.lua call over every key, a batch completion one
complete_many.lua call: the single operations' own rules (the head's ``claim`` and
``complete``) applied key by key inside one script, each completion fenced on its own
ticket, with one clock, one set of shared terms, and one compact reply (see rows.claims and
rows.completions). The keys of one call must share those terms (lease, ttl, expiry policy and
attempts; codec and ttl), so requests that differ are split into groups, one call each, all
sent in one write. On a cluster a script may only touch keys of one slot, and records hash to
different slots, so there the groups are split by slot too, and each goes through the store's
own path, which routes it to its slot's node: as many calls as slots, each still atomic.

``run_many`` sends any list of commands in one pipeline (the hybrid store's copies use it). A
server that lacks the library (or the scripts) is loaded once and the batch sent again.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from mideng.core.record import Claim, ClaimRequest
from mideng.errors import LeaseLostError
from mideng.stores.batch import Completed, Completion, placed, rounds
from mideng.stores.redis.commands import Command
from mideng.stores.redis.direct import pack

T = TypeVar("T")


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


# -- whole batches: claim_many.lua and complete_many.lua ---------------------------------------
# What the keys of one script call share. attrgetters, so comparing a batch's terms runs no
# Python frame per key.
_claim_terms: Callable[[ClaimRequest], Hashable] = operator.attrgetter(
    "lease", "ttl", "on_expiry", "max_attempts"
)
_completion_terms: Callable[[Completion], Hashable] = operator.attrgetter("codec", "ttl")


def groups(
    store: Any, items: Sequence[T], terms: Callable[[T], Hashable], name: Callable[[T], str]
) -> list[list[int]]:
    """The positions of ``items`` that one script call may take together: those with equal
    ``terms``, and on a cluster the same slot of their record's key ``name``."""
    if store._target.kind == "cluster":
        slot = store._redis.crc.key_slot
        by: dict[Hashable, list[int]] = {}
        for i, item in enumerate(items):
            by.setdefault((terms(item), slot(name(item).encode())), []).append(i)
        return list(by.values())
    first = terms(items[0])
    if all(map(first.__eq__, map(terms, items))):
        return [list(range(len(items)))]
    by = {}
    for i, item in enumerate(items):
        by.setdefault(terms(item), []).append(i)
    return list(by.values())


def _scatter(n: int, parts: list[list[int]], answers: list[list[Any]]) -> list[Any]:
    if len(parts) == 1:
        return answers[0]
    out: list[Any] = [None] * n
    for positions, part in zip(parts, answers, strict=True):
        for i, answer in zip(positions, part, strict=True):
            out[i] = answer
    return out


def _claim_commands(
    store: Any, reqs: Sequence[ClaimRequest]
) -> tuple[list[list[int]], list[Command[Any]]]:
    c = store.commands
    parts = groups(store, reqs, _claim_terms, lambda r: c.key(r.scope, r.key))
    return parts, [c.claim_many([reqs[i] for i in p]) for p in parts]


def _completion_commands(
    store: Any, items: Sequence[Completion]
) -> tuple[list[list[int]], list[Command[Any]]]:
    c = store.commands
    parts = groups(store, items, _completion_terms, lambda i: c.key(i.ticket.scope, i.ticket.key))
    return parts, [c.complete_many([items[i] for i in p]) for p in parts]


def claim_many(store: Any, reqs: Sequence[ClaimRequest]) -> list[Claim]:
    if not reqs:
        return []
    parts, commands = _claim_commands(store, reqs)
    return _scatter(len(reqs), parts, run_many(store, commands))


def complete_many(store: Any, items: Sequence[Completion]) -> list[Completed]:
    if not items:
        return []
    # A key's repeats would run in the order of their terms' groups, not the batch's.
    parts = rounds(items)
    if parts is not None:
        answers = [complete_many(store, [items[i] for i in p]) for p in parts]
        return placed(len(items), parts, answers)
    parts, commands = _completion_commands(store, items)
    return _scatter(len(items), parts, run_many(store, commands))


async def aclaim_many(store: Any, reqs: Sequence[ClaimRequest]) -> list[Claim]:
    if not reqs:
        return []
    parts, commands = _claim_commands(store, reqs)
    return _scatter(len(reqs), parts, await arun_many(store, commands))


async def acomplete_many(store: Any, items: Sequence[Completion]) -> list[Completed]:
    if not items:
        return []
    parts = rounds(items)
    if parts is not None:
        answers = [await acomplete_many(store, [items[i] for i in p]) for p in parts]
        return placed(len(items), parts, answers)
    parts, commands = _completion_commands(store, items)
    return _scatter(len(items), parts, await arun_many(store, commands))
