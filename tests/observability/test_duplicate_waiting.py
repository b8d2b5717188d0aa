"""Callers that find a key in progress and wait for it write one WARNING line a key a window,
which says how many sightings it folded in; replays keep a line each."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mideng import Guard
from mideng.core.record import ClaimRequest
from mideng.errors import InProgressError
from mideng.observability.logs import calls
from mideng.observability.logs.calls import Waiting
from mideng.stores.memory import MemoryStore
from mideng.stores.sqlite import SQLiteStore

LOG = logging.getLogger("mideng")


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def about(self, outcome: str) -> list[str]:
        return [line for line in self.lines if f" outcome={outcome} " in line]


class Clock:
    """The waiting lines' clock, moved by the test: no storm outlasts a window by chance."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    ticking = Clock()
    monkeypatch.setattr(calls, "waiting", Waiting(window=1.0, kept=3, clock=ticking))
    return ticking


@pytest.fixture
def lines(clock: Clock) -> Iterator[Lines]:
    handler, level = Lines(), LOG.level
    LOG.addHandler(handler)
    LOG.setLevel(logging.WARNING)
    try:
        yield handler
    finally:
        LOG.removeHandler(handler)
        LOG.setLevel(level)


def test_two_hundred_waiting_duplicates_of_one_key_write_one_line(
    lines: Lines, clock: Clock, tmp_path: Path
) -> None:
    guard = Guard(SQLiteStore(str(tmp_path / "w.db")))
    guard.configure_scope("callback", in_progress="wait")
    first_running, runs = threading.Event(), []

    def body() -> str:
        runs.append(1)
        first_running.set()
        time.sleep(0.5)  # the duplicates arrive while it runs
        return "paid"

    def call(key: str) -> None:
        assert guard.run("callback", key, body) == "paid"

    first = [threading.Thread(target=call, args=(key,)) for key in ("t-1", "t-2")]
    for thread in first:
        thread.start()
    assert first_running.wait(10)
    crowd = [threading.Thread(target=call, args=(f"t-{1 + i % 2}",)) for i in range(200)]
    for thread in crowd:
        thread.start()
    for thread in first + crowd:
        thread.join()
    assert len(runs) == 2
    waited = lines.about("in_progress")
    assert sorted(line.split(" outcome=")[0] for line in waited) == [
        "mideng duplicate scope=callback key=t-1",
        "mideng duplicate scope=callback key=t-2",
    ]
    # Those that came after the first had finished replayed, a line each; the others' next
    # line, a window later, counts them: every sighting is in a line.
    replays = len(lines.about("replay"))
    clock.now += 1.0
    folded = [calls.waiting.folded("callback", key) for key in ("t-1", "t-2")]
    assert 2 + sum(n or 0 for n in folded) + replays == 200
    guard.store.close()


def held(guard: Guard, key: str) -> None:
    """``key`` claimed by another holder, its lease live."""
    guard.store.claim(ClaimRequest("callback", key, "other-holder", 60.0, 60.0))


def sighted(guard: Guard, key: str) -> None:
    with pytest.raises(InProgressError):
        guard.run("callback", key, lambda: "paid")


def test_a_key_still_in_progress_a_window_later_gets_a_line_with_what_it_folded(
    lines: Lines, clock: Clock
) -> None:
    guard = Guard(MemoryStore())
    held(guard, "t-1")
    for _ in range(3):
        sighted(guard, "t-1")
    assert len(lines.about("in_progress")) == 1
    assert " folded=" not in lines.lines[0]
    clock.now += 0.9
    sighted(guard, "t-1")  # still in the window
    clock.now += 0.2
    sighted(guard, "t-1")
    assert len(lines.about("in_progress")) == 2
    assert lines.lines[-1].endswith(" folded=3")
    # Three keys are remembered; a fourth forgets the one seen longest ago.
    for key in ("t-2", "t-3", "t-4"):
        held(guard, key)
        sighted(guard, key)
        sighted(guard, key)
    assert len(lines.about("in_progress")) == 5
    sighted(guard, "t-1")  # forgotten: a line, folding nothing
    assert len(lines.about("in_progress")) == 6
    assert " folded=" not in lines.lines[-1]


def test_replays_keep_a_line_each(lines: Lines) -> None:
    guard = Guard(MemoryStore())
    assert guard.run("callback", "t-1", lambda: "paid") == "paid"
    for _ in range(3):
        assert guard.run("callback", "t-1", lambda: "again") == "paid"
    assert len(lines.about("replay")) == 3
