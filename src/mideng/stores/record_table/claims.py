"""What a store of the record table (SQL, SQLite) remembers about its claims between calls,
to spend fewer statements.

``HeldClaims``: the rows of the claims it handed out that are still open, so settling one needs
no read-back. ``ClaimOrder``: per scope, whether a claim should read first or insert first.
Neither is ever needed for correctness: a miss or a wrong guess costs one statement.
"""

from __future__ import annotations

import threading

from mideng.core.record import ACQUIRED, Claim, Record, Ticket


class HeldClaims:
    """The rows of the claims this store handed out that are still open, by ticket.

    A fenced update then needs no read-back to answer with the new row: it follows from the
    claim's row and the clock the update stamped. A ticket from elsewhere simply misses and
    the row is read. Bounded, so claims that are never settled can't grow it without end.
    """

    LIMIT = 65536

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str, str, int], Record] = {}
        self._lock = threading.Lock()

    def keep(self, claim: Claim) -> Claim:
        """Keep an acquired claim's row; duplicates hold nothing to settle."""
        if claim.outcome is ACQUIRED:
            r = claim.record
            rows = self._rows
            rows[(r.scope, r.key, r.owner, r.fence)] = r  # one dict store: atomic, no lock
            if len(rows) > self.LIMIT:
                self._trim()
        return claim

    def _trim(self) -> None:
        # Only trimming walks the dict, so only it takes the lock (two threads trimming at
        # once would drop the same oldest entry twice).
        with self._lock:
            while len(self._rows) > self.LIMIT:
                try:
                    del self._rows[next(iter(self._rows))]
                except (KeyError, RuntimeError, StopIteration):  # changed by a keep or pop
                    continue

    def get(self, t: Ticket) -> Record | None:
        return self._rows.get((t.scope, t.key, t.owner, t.fence))

    def pop(self, t: Ticket) -> Record | None:
        return self._rows.pop((t.scope, t.key, t.owner, t.fence), None)  # atomic: no lock


class ClaimOrder:
    """Which claim order suits each scope: what its recent claims found, as a moving share.

    Reading first makes a duplicate one read and a new key a read plus an insert; inserting
    first makes a new key one insert and a duplicate an insert plus a read. Only the answer
    tells which case a claim is, so each scope keeps the share of its recent claims that found
    the key taken (weighted to the last few) and reads first while that share is at least half:
    a scope of fresh requests inserts first, a redelivery storm or a retrying client switches
    to reads within three calls. Both orders are the same claim, correct under any
    interleaving; the guess only moves cost. ``fixed`` pins the order instead.

    ``shares``: the share per scope, which a store's claim may read itself (reading first while
    it is at least half) and leave alone when its outcome is what a settled share already says
    (``saw`` would return at once): the SQLite store's duplicate then makes neither call.
    """

    __slots__ = ("fixed", "shares")
    WEIGHT = 0.25  # of the newest claim in the share
    SCOPES = 1024  # remembered at most; past that the memory starts over

    def __init__(self, fixed: bool | None = None) -> None:
        self.fixed = fixed
        self.shares: dict[str, float] = {}

    def read_first(self, scope: str) -> bool:
        if self.fixed is not None:
            return self.fixed
        return self.shares.get(scope, 0.0) >= 0.5

    def saw(self, scope: str, claim: Claim) -> None:
        """Note a claim's outcome. A fresh row is fence 1; anything else found the key taken.
        Threads may interleave here: a lost update only skews one guess."""
        if self.fixed is not None:
            return
        taken = 0.0 if claim.outcome is ACQUIRED and claim.record.fence == 1 else 1.0
        shares = self.shares
        share = shares.get(scope)
        if share == taken:  # settled: a run of one kind ends exactly there (below); no write
            return
        if share is None:
            if len(shares) >= self.SCOPES:
                shares.clear()
            share = 0.0
        share += (taken - share) * self.WEIGHT
        shares[scope] = taken if abs(taken - share) < 1e-6 else share
