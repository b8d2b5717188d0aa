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
server that lacks the library (or the scripts) is loaded once and the batch sent again. Each
operation is written once, as a procedure of effects (mideng.core.effects) over the store's
sync or async connection, whose calls have the same names.
"""

from __future__ import annotations

import abc
import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from mideng.core import effects
from mideng.core.effects import Effects, either
from mideng.core.record import Claim, ClaimRequest
from mideng.errors import LeaseLostError, StoreUnavailableError
from mideng.stores.batch import BatchStore, Completed, Completion, distinct, placed, rounds
from mideng.stores.redis.commands import Command, Commands
from mideng.stores.redis.connect import Connection, Target
from mideng.stores.redis.direct import pack
from mideng.stores.redis.scripts import Calls

T = TypeVar("T")


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


class RedisBatch(BatchStore):
    """``RedisStore``'s batches, and ``run_many`` for any list of commands."""

    commands: Commands
    _calls: Calls
    _target: Target
    _redis: Any
    _errors: tuple[type[BaseException], ...]

    # RedisStore's: its connections, one command run as its single operations run it, and
    # its one rule for what a driver error becomes.
    @abc.abstractmethod
    def _connection(self) -> Connection: ...

    @abc.abstractmethod
    async def _aconnection(self) -> Connection: ...

    @abc.abstractmethod
    def _run(self, op: Command[T]) -> T: ...

    @abc.abstractmethod
    async def _arun(self, op: Command[T]) -> T: ...

    @abc.abstractmethod
    def _unavailable(self, exc: BaseException) -> StoreUnavailableError: ...

    def claim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]:
        distinct(reqs)
        return effects.run(self._claim_many(reqs))

    def complete_many(self, items: Sequence[Completion]) -> list[Completed]:
        return effects.run(self._complete_many(items))

    async def aclaim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]:
        distinct(reqs)
        return await effects.arun(self._claim_many(reqs))

    async def acomplete_many(self, items: Sequence[Completion]) -> list[Completed]:
        return await effects.arun(self._complete_many(items))

    def run_many(self, commands: Sequence[Command[Any]]) -> list[Any]:
        """Every command in one pipeline; each answer (a LeaseLostError as its answer)."""
        return effects.run(self._many(commands))

    async def arun_many(self, commands: Sequence[Command[Any]]) -> list[Any]:
        return await effects.arun(self._many(commands))

    def _many(self, commands: Sequence[Command[Any]]) -> Effects[list[Any]]:
        if not commands:
            return []
        if self._target.kind == "cluster":
            out: list[Any] = []
            for command in commands:
                try:
                    out.append((yield effects.call(self._run, self._arun, command)))
                except LeaseLostError as exc:
                    out.append(exc)
            return out
        try:
            conn = yield effects.call(self._connection, self._aconnection)
            replies = yield from _pipeline(conn, self._forms(commands))
            error = _missing(replies)
            if error is not None:
                for load in self._calls.loads(error):
                    yield either(conn.client.execute_command, *load)
                # Formed again: a server without the library takes the scripts instead.
                replies = yield from _pipeline(conn, self._forms(commands))
                error = _missing(replies)
                if error is not None:
                    raise error
        except self._errors as exc:
            raise self._unavailable(exc) from exc
        return finish_all(commands, replies)

    def _forms(self, commands: Sequence[Command[Any]]) -> list[tuple[Any, ...]]:
        return [self._calls.form(c.script, c.args) for c in commands]

    def _claim_many(self, reqs: Sequence[ClaimRequest]) -> Effects[list[Claim]]:
        if not reqs:
            return []
        c = self.commands
        parts = self._groups(reqs, _claim_terms, lambda r: c.key(r.scope, r.key))
        commands = [c.claim_many([reqs[i] for i in p]) for p in parts]
        return _scatter(len(reqs), parts, (yield from self._many(commands)))

    def _complete_many(self, items: Sequence[Completion]) -> Effects[list[Completed]]:
        if not items:
            return []
        # A key's repeats would run in the order of their terms' groups, not the batch's.
        rounds_of = rounds(items)
        if rounds_of is not None:
            answers = []
            for p in rounds_of:
                answers.append((yield from self._complete_many([items[i] for i in p])))
            return placed(len(items), rounds_of, answers)
        c = self.commands
        parts = self._groups(
            items, _completion_terms, lambda i: c.key(i.ticket.scope, i.ticket.key)
        )
        commands = [c.complete_many([items[i] for i in p]) for p in parts]
        return _scatter(len(items), parts, (yield from self._many(commands)))

    def _groups(
        self, items: Sequence[T], terms: Callable[[T], Hashable], name: Callable[[T], str]
    ) -> list[list[int]]:
        """The positions of ``items`` that one script call may take together: those with
        equal ``terms``, and on a cluster the same slot of their record's key ``name``."""
        if self._target.kind == "cluster":
            slot = self._redis.crc.key_slot
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


def _identity(item: Completion) -> tuple[str, str]:
    return item.ticket.scope, item.ticket.key


def _pipeline(conn: Connection, sends: list[tuple[Any, ...]]) -> Effects[list[Any]]:
    """``sends`` in one write: through the store's direct sender where it has one (the same
    probe-free path its single operations take), else a redis-py pipeline."""
    if conn.direct is not None:
        replies = yield either(conn.direct.call_many, [pack(args) for args in sends])
        return list(replies)
    pipe = conn.client.pipeline(transaction=False)
    for args in sends:
        pipe.execute_command(*args)
    return list((yield either(pipe.execute, raise_on_error=False)))


# -- whole batches: claim_many.lua and complete_many.lua ---------------------------------------
# What the keys of one script call share. attrgetters, so comparing a batch's terms runs no
# Python frame per key.
_claim_terms: Callable[[ClaimRequest], Hashable] = operator.attrgetter(
    "lease", "ttl", "on_expiry", "max_attempts"
)
_completion_terms: Callable[[Completion], Hashable] = operator.attrgetter("codec", "ttl")


def _scatter(n: int, parts: list[list[int]], answers: list[list[Any]]) -> list[Any]:
    if len(parts) == 1:
        return answers[0]
    out: list[Any] = [None] * n
    for positions, part in zip(parts, answers, strict=True):
        for i, answer in zip(positions, part, strict=True):
            out[i] = answer
    return out
