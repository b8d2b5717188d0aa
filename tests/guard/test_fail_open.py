"""Fail-closed by default; fail-open only when asked, with a WARNING every time."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from mideng import Guard
from mideng.errors import StoreUnavailableError
from mideng.stores.sqlite import SQLiteStore


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[SQLiteStore]:
    """A store whose file another process holds locked for longer than the store waits."""
    path = tmp_path / "m.db"
    store = SQLiteStore(str(path), timeout=0.1)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    yield store
    blocker.execute("ROLLBACK")
    blocker.close()
    store.close()


def test_fail_closed_is_the_default(locked: SQLiteStore) -> None:
    ran: list[int] = []
    with pytest.raises(StoreUnavailableError):
        Guard(locked).run("pay", "t1", lambda: ran.append(1))
    assert ran == []


def test_fail_open_runs_unguarded_and_warns_each_time(
    locked: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    guard = Guard(locked, fail_open=True)
    ran: list[int] = []

    def run(n: int) -> str:
        ran.append(n)
        return f"run {n}"

    with caplog.at_level(logging.WARNING, logger="mideng"):
        assert guard.run("pay", "t1", run, 1) == "run 1"
        assert guard.run("pay", "t1", run, 2) == "run 2"

        async def body() -> str:
            ran.append(3)
            return "async"

        assert asyncio.run(guard.arun("pay", "t1", body)) == "async"
    assert ran == [1, 2, 3]
    warnings = [r.getMessage() for r in caplog.records if r.name == "mideng"]
    assert len(warnings) == 3
    assert all("runs unguarded (fail_open)" in w and "pay:t1" in w for w in warnings)


def test_fail_open_per_scope_only(locked: SQLiteStore) -> None:
    guard = Guard(locked)
    guard.configure_scope("notify", fail_open=True)
    assert guard.run("notify", "n1", lambda: "sent") == "sent"
    with pytest.raises(StoreUnavailableError):
        guard.run("charge", "c1", lambda: "charged")


def test_a_store_lost_after_the_body_still_answers_in_fail_open(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = SQLiteStore(str(path), timeout=0.1)
    blocker = sqlite3.connect(path, isolation_level=None)

    def body() -> str:
        blocker.execute("BEGIN EXCLUSIVE")  # the store goes away while the body runs
        return "paid"

    try:
        assert Guard(store, fail_open=True).run("pay", "t2", body) == "paid"
        blocker.execute("ROLLBACK")

        def body_closed() -> str:
            blocker.execute("BEGIN EXCLUSIVE")
            return "paid"

        with pytest.raises(StoreUnavailableError):
            Guard(store).run("pay", "t3", body_closed)
    finally:
        if blocker.in_transaction:
            blocker.execute("ROLLBACK")
        blocker.close()
        store.close()
