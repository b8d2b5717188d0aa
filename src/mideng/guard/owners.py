"""Claim owner ids: unique per claim, across threads, processes and restarts."""

from __future__ import annotations

import itertools
import os


class _Owners:
    """A random per-process prefix and a counter.

    As unique as uuid4, without a getrandom call per claim; a forked child draws a new prefix
    so it can never reuse its parent's ids.
    """

    def __init__(self) -> None:
        self._reseed()
        os.register_at_fork(after_in_child=self._reseed)

    def _reseed(self) -> None:
        self._prefix = os.urandom(9).hex()
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}-{next(self._counter)}"


new_owner = _Owners().next
