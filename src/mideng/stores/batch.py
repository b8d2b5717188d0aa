"""The batch capability: claim many keys, and complete many claims, in one round trip.

A message consumer that fetched a batch claims it whole and completes what ran together, so
a batch of 100 costs about what one message does on a server store. Each answer is what the
single operation would have answered for that item, in the order asked; a completion whose
claim was lost answers its LeaseLostError in place instead of raising, so one lost claim does
not hide the others' results. A store offers it by subclassing ``BatchStore``; callers check
``isinstance(store, BatchStore)`` and fall back to the single operations otherwise.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass

from mideng.core.record import Claim, ClaimRequest, Record, Ticket
from mideng.errors import ConfigurationError, LeaseLostError


@dataclass(slots=True)
class Completion:
    """One ``complete(ticket, result, codec, ttl)`` of a batch."""

    ticket: Ticket
    result: bytes
    codec: str
    ttl: float | None


Completed = Record | LeaseLostError


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


def distinct(reqs: Sequence[ClaimRequest]) -> None:
    """Refuse a batch that asks for one key twice: the second claim's answer would depend on
    the order a store happens to apply them in."""
    seen = {(r.scope, r.key) for r in reqs}
    if len(seen) != len(reqs):
        raise ConfigurationError("a batch claim names the same (scope, key) twice")
