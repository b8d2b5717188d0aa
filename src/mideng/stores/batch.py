"""The batch capability: claim many keys, and complete many claims, in one round trip.

A message consumer that fetched a batch claims it whole and completes what ran together, so
a batch of 100 costs about what one message does on a server store. Each answer is what the
single operation would have answered for that item, in the order asked; a completion whose
claim was lost answers its LeaseLostError in place instead of raising, so one lost claim does
not hide the others' results. A store offers it by subclassing ``BatchStore``; callers check
``isinstance(store, BatchStore)`` and fall back to the single operations otherwise.

``LocalBatch`` is the capability of the embedded stores (memory, SQLite): the single
operations in a loop. There is no round trip to save in-process, and each claim stays its own
short transaction, so a batch holds no lock longer than one claim does.
"""

from __future__ import annotations

import abc
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from mideng.core.record import Claim, ClaimRequest, Record, Ticket
from mideng.errors import ConfigurationError, LeaseLostError
from mideng.stores.base import LocalStore


@dataclass(slots=True)
class Completion:
    """One ``complete(ticket, result, codec, ttl)`` of a batch."""

    ticket: Ticket
    result: bytes
    codec: str
    ttl: float | None


Completed = Record | LeaseLostError
T = TypeVar("T")


class BatchStore(abc.ABC):
    """Batched claims and completions; sync and async twins, both abstract."""

    @abc.abstractmethod
    def claim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]:
        """``[claim(r) for r in reqs]`` in one round trip; keys must be distinct."""

    @abc.abstractmethod
    def complete_many(self, items: Sequence[Completion]) -> list[Completed]:
        """``complete`` for each item in one round trip; a lost claim answers its error."""

    @abc.abstractmethod
    async def aclaim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]: ...

    @abc.abstractmethod
    async def acomplete_many(self, items: Sequence[Completion]) -> list[Completed]: ...


class LocalBatch(LocalStore, BatchStore):
    """Mixed into MemoryStore and SQLiteStore; the async twins offload as theirs do."""

    def claim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]:
        distinct(reqs)
        return [self.claim(r) for r in reqs]

    def complete_many(self, items: Sequence[Completion]) -> list[Completed]:
        out: list[Completed] = []
        for item in items:
            try:
                out.append(self.complete(item.ticket, item.result, item.codec, item.ttl))
            except LeaseLostError as exc:
                out.append(exc)
        return out

    async def aclaim_many(self, reqs: Sequence[ClaimRequest]) -> list[Claim]:
        return await self._offload(self.claim_many, reqs)

    async def acomplete_many(self, items: Sequence[Completion]) -> list[Completed]:
        return await self._offload(self.complete_many, items)


def distinct(reqs: Sequence[ClaimRequest]) -> None:
    """Refuse a batch that asks for one key twice: the second claim's answer would depend on
    the order a store happens to apply them in."""
    seen = {(r.scope, r.key) for r in reqs}
    if len(seen) != len(reqs):
        raise ConfigurationError("a batch claim names the same (scope, key) twice")


_ticket_key: Callable[[Completion], tuple[str, str]] = operator.attrgetter(
    "ticket.scope", "ticket.key"
)


def rounds(items: Sequence[Completion]) -> list[list[int]] | None:
    """None when no (scope, key) repeats in a batch completion, the usual batch: the check is
    one set of the keys, built by C code (an attrgetter, no Python frame per item), run on
    every batch. Otherwise the positions split into rounds that each name a key once, every
    key's items in the order asked: a store that applies a round at once (one statement, one
    script a set of terms) could neither tell two items of a key apart nor keep their order,
    and round after round the batch answers what the single completions one after another
    would (the first live ticket completes; the rest of that key lose their lease)."""
    if len(set(map(_ticket_key, items))) == len(items):
        return None
    seen: dict[tuple[str, str], int] = {}
    out: list[list[int]] = []
    for i, key in enumerate(map(_ticket_key, items)):
        n = seen[key] = seen.get(key, -1) + 1
        if n == len(out):
            out.append([])
        out[n].append(i)
    return out


def placed(n: int, parts: Sequence[Sequence[int]], answers: Sequence[Sequence[T]]) -> list[T]:
    """The answers of ``parts`` (positions of one batch) back in the batch's order."""
    out: list[Any] = [None] * n
    for positions, part in zip(parts, answers, strict=True):
        for i, answer in zip(positions, part, strict=True):
            out[i] = answer
    return out
