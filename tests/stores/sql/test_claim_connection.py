"""The claim's own connection handling (``Executor.claim``): what ``run`` does for every other
operation, spelt inline for the claim. A deadlock is tried again on another connection, at most
DEADLOCK_RETRIES times, and a connection a statement failed on is never used again. No database:
the cursors answer as psycopg's would."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from mideng import Guard
from mideng.errors import StoreUnavailableError
from mideng.stores.sql import SQLStore
from mideng.stores.sql.execute import DEADLOCK_RETRIES


class Pooled:
    invalidated = False

    def invalidate(self) -> None:
        self.invalidated = True

    def close(self) -> None:
        pass


class Cursor:
    """Answers the read of a succeeded record, after ``deadlocks`` deadlocks."""

    rowcount = 1

    def __init__(self, deadlocks: int = 0) -> None:
        self.deadlocks = deadlocks
        now = time.time()
        head = ("succeeded", 1, "o-1", None, None, b'{"a":1}', "json", None, 1, None)
        self.row: tuple[Any, ...] = (*head, now, now, now + 60, now)

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> None:
        if self.deadlocks:
            self.deadlocks -= 1
            raise psycopg.errors.DeadlockDetected("deadlock detected")

    def fetchone(self) -> tuple[Any, ...]:
        return self.row


def _store(connections: list[tuple[Pooled, Cursor]]) -> SQLStore:
    store = SQLStore("postgresql://stub@127.0.0.1/stub", create_schema=False, read_first=True)
    store.executor.first = None  # no schema behind the stub cursors to check
    cache = store.executor.cache
    cache.free.extend(reversed(connections))  # the first one is taken first
    cache.owned = len(connections)
    return store


def _body() -> dict[str, int]:
    raise AssertionError("a replay never runs the body")


def test_a_deadlocked_claim_is_tried_again_on_another_connection() -> None:
    bad, good = (Pooled(), Cursor(deadlocks=1)), (Pooled(), Cursor())
    store = _store([bad, good])
    assert Guard(store).run("s", "k", _body) == {"a": 1}
    assert bad[0].invalidated
    assert not good[0].invalidated
    assert store.executor.cache.free == [good]  # the failed one is gone
    assert store.executor.cache.owned == 1
    assert Guard(store).run("s", "k", _body) == {"a": 1}  # and the next claim takes the good one


def test_a_claim_that_keeps_deadlocking_fails_as_unavailable_after_the_retries() -> None:
    connections = [(Pooled(), Cursor(deadlocks=1)) for _ in range(DEADLOCK_RETRIES + 2)]
    store = _store(connections)
    with pytest.raises(StoreUnavailableError, match="DeadlockDetected"):
        Guard(store).run("s", "k", _body)
    tried = DEADLOCK_RETRIES + 1
    assert [pooled.invalidated for pooled, _ in connections] == [True] * tried + [False]
    assert store.executor.cache.free == [connections[-1]]
