"""Claim owner ids: unique per claim, across threads, processes and restarts."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator


class _Owners:
    """A random per-process prefix and a counter.

    As unique as uuid4, without a getrandom call per claim; a forked child draws a new prefix
    so it can never reuse its parent's ids.
    """

    def __init__(self) -> None:
        self._reseed()
        os.register_at_fork(after_in_child=self._reseed)

    def _reseed(self) -> None:
        prefix = os.urandom(9).hex() + "-"
        # Built of C iterators, so ``next(OWNERS.ids)`` mints an id without a Python-level
        # call (the Guard does it on every call); replaced, not reset, in a forked child.
        self.ids: Iterator[str] = map(prefix.__add__, map(str, itertools.count(1)))

    def next(self) -> str:
        return next(self.ids)


OWNERS = _Owners()
new_owner = OWNERS.next
