"""The SQLite store's async calls run on the loop's thread when they need not wait: no thread
hop for an uncontended claim, completion or look-up; a write lock held elsewhere is waited for
in the executor, the loop running on meanwhile; checkpoints off the loop; nothing in place when
every commit flushes the disk."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mideng import Guard, Status
from mideng.core.event_loop import to_thread
from mideng.errors import StoreUnavailableError
from mideng.stores.sqlite import SQLiteStore
from mideng.stores.sqlite import store as sqlite_store


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The calls made in the executor, by name, and the threads they ran on."""
    seen: Counter[str] = Counter()
    real = to_thread

    async def counted(fn: Callable[..., Any], *args: Any) -> Any:
        seen[getattr(fn, "__name__", repr(fn))] += 1
        return await real(fn, *args)

    monkeypatch.setattr(sqlite_store, "to_thread", counted)
    return seen


def hold_lock(path: str, locked: threading.Event, release: threading.Event) -> None:
    """Another connection's write transaction on the file, from ``locked`` until ``release``."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    locked.set()
    release.wait(30)
    conn.execute("COMMIT")
    conn.close()


async def ok() -> dict[str, int]:
    return {"ok": 1}


def test_uncontended_calls_run_in_place(tmp_path: Path, hops: Counter[str]) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"))
    guard = Guard(store)

    async def calls() -> None:
        for n in range(100):
            assert await guard.arun("s", f"k{n}", ok) == {"ok": 1}  # claim + completion
        for n in range(100):
            assert await guard.arun("s", f"k{n}", ok) == {"ok": 1}  # a replay's claim
        assert (await store.aget("s", "k1")) is not None

    asyncio.run(calls())
    # 301 calls in place, 200 rows written (fewer than a checkpoint waits for): none hopped.
    assert hops == Counter()
    store.close()


def test_a_lock_held_elsewhere_is_waited_for_off_the_loop(
    tmp_path: Path, hops: Counter[str]
) -> None:
    path = str(tmp_path / "s.db")
    store = SQLiteStore(path)
    guard = Guard(store)
    runs: list[int] = []
    locked, release, released = threading.Event(), threading.Event(), threading.Event()

    def holder() -> None:  # another connection (another process would do the same) writing
        hold_lock(path, locked, release)
        released.set()

    async def body() -> str:
        runs.append(1)
        return "done"

    async def scenario() -> tuple[str, float]:
        call = asyncio.ensure_future(guard.arun("s", "held", body))
        # The loop goes on while the claim waits for the lock: ticks pass, the call pends.
        # A claim that waited in place would hold the loop for its busy timeout.
        ticks = [time.monotonic()]
        while len(ticks) < 20:
            await asyncio.sleep(0.005)
            ticks.append(time.monotonic())
        assert not call.done()
        release.set()
        answer = await asyncio.wait_for(call, 30)
        return answer, max(b - a for a, b in itertools.pairwise(ticks))

    thread = threading.Thread(target=holder)
    thread.start()
    assert locked.wait(10)
    try:
        answer, longest = asyncio.run(scenario())
    finally:
        release.set()
        thread.join()
    assert released.is_set()
    assert (answer, runs) == ("done", [1])
    assert longest < 1.0, longest
    assert hops["claim"] == 1  # refused in place at once, then waited for in the executor
    record = store.get("s", "held")
    assert record is not None
    assert record.status is Status.SUCCEEDED
    store.close()


def test_checkpoints_run_off_the_loop_and_no_call_waits_for_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "CHECKPOINT_ROWS", 10)
    store = SQLiteStore(str(tmp_path / "s.db"))
    guard = Guard(store)
    where: list[int] = []
    gate = threading.Event()
    real = store._checkpoint

    def checkpoint() -> None:
        where.append(threading.get_ident())
        assert gate.wait(10)  # the first is held until the loop has seen its call return
        real()

    monkeypatch.setattr(store, "_checkpoint", checkpoint)

    async def calls() -> tuple[int, int]:
        # Three rows a first call (its insert, the table's row count, its completion): one
        # checkpoint every ten rows, seven in 25 calls.
        for n in range(25):
            await guard.arun("s", f"k{n}", ok)
            running = store._local.inline.checkpoint
            if running is not None and not gate.is_set():
                assert not running.done()  # started, and the call that started it returned
                gate.set()
            if running is not None:
                await running
        written = len(where)
        for n in range(100):  # replays write nothing: they start no checkpoint
            await guard.arun("s", f"k{n % 25}", ok)
        assert len(where) == written
        return threading.get_ident(), written

    loop_thread, written = asyncio.run(calls())
    assert written == 7
    assert loop_thread not in where
    # The checkpoints copied the WAL back: a passive one now finds nothing left to copy.
    conn = sqlite3.connect(str(tmp_path / "s.db"))
    busy, log, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0
    assert log == copied
    conn.close()
    store.close()


@pytest.mark.parametrize(
    "options", [{"synchronous": "FULL"}, {"inline": False}], ids=["full", "inline-off"]
)
def test_nothing_runs_in_place_when_told_or_when_commits_flush(
    tmp_path: Path, hops: Counter[str], options: dict[str, Any]
) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"), **options)
    assert store.inline is False
    guard = Guard(store)

    async def calls() -> None:
        for n in range(5):
            await guard.arun("s", f"k{n}", ok)

    asyncio.run(calls())
    assert hops == Counter({"claim": 5, "complete": 5})
    store.close()


def test_the_url_says_inline() -> None:
    assert SQLiteStore.from_url("sqlite:///:memory:?inline=0").inline is False


def test_only_a_lock_refusal_sends_a_call_to_the_executor() -> None:
    def failure(code: int | None) -> StoreUnavailableError:
        cause = sqlite3.OperationalError("database is locked")
        cause.sqlite_errorcode = code  # type: ignore[attr-defined]
        exc = StoreUnavailableError("failed")
        exc.__cause__ = cause
        return exc

    assert sqlite_store.waited(failure(5))  # SQLITE_BUSY
    assert sqlite_store.waited(failure(517))  # SQLITE_BUSY_SNAPSHOT
    assert sqlite_store.waited(failure(6))  # SQLITE_LOCKED
    assert not sqlite_store.waited(failure(13))  # SQLITE_FULL: raised, not retried
    assert not sqlite_store.waited(failure(None))
    assert not sqlite_store.waited(StoreUnavailableError("no cause"))


def test_a_failed_checkpoint_is_logged_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # It runs after a call that is done: its failure must not become that call's.
    store = SQLiteStore(str(tmp_path / "s.db"))

    def broken() -> sqlite3.Connection:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store, "_conn", broken)
    store._checkpoint()
    assert any("checkpoint failed" in r.getMessage() for r in caplog.records)
    store.close()


def test_a_completion_refused_in_place_is_written_once_in_the_executor(
    tmp_path: Path, hops: Counter[str]
) -> None:
    # The body has run when its completion finds the lock held elsewhere: the completion is
    # made again in the executor, and the record ends succeeded with the body run once.
    path = str(tmp_path / "s.db")
    store = SQLiteStore(path)
    guard = Guard(store)
    runs: list[int] = []
    locked, release = threading.Event(), threading.Event()

    thread = threading.Thread(target=hold_lock, args=(path, locked, release))

    async def body() -> str:
        runs.append(1)
        thread.start()  # the lock is taken after the claim, before the completion
        assert await asyncio.to_thread(locked.wait, 10)
        asyncio.get_running_loop().call_later(0.1, release.set)
        return "done"

    try:
        assert asyncio.run(guard.arun("s", "k", body)) == "done"
    finally:
        release.set()
        thread.join()
    assert runs == [1]
    assert hops["complete"] == 1
    assert hops["claim"] == 0
    record = store.get("s", "k")
    assert record is not None
    assert record.status is Status.SUCCEEDED
    assert asyncio.run(guard.arun("s", "k", body)) == "done"  # a replay: nothing runs
    assert runs == [1]
    store.close()
