"""A duplicate's WARNING line follows the "mideng" logger's level as logging decides it, though
the duplicate reads the logger's level cache in place: every way an application turns the line
off or on again takes effect on the next duplicate."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from mideng import Guard
from mideng.stores.memory import MemoryStore

LOG = logging.getLogger("mideng")


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    level, disabled = LOG.level, LOG.disabled
    LOG.addHandler(handler)
    try:
        yield handler
    finally:
        LOG.removeHandler(handler)
        LOG.setLevel(level)
        LOG.disabled = disabled
        logging.disable(logging.NOTSET)


def duplicates(guard: Guard, count: int) -> int:
    """Run ``count`` calls of one key; how many times the body ran."""
    runs: list[int] = []

    def body() -> str:
        runs.append(1)
        return "done"

    for _ in range(count):
        assert guard.run("orders", "o-1", body) == "done"
    return len(runs)


def test_each_change_of_level_applies_to_the_next_duplicate(lines: Lines) -> None:
    guard = Guard(MemoryStore())
    LOG.setLevel(logging.WARNING)
    assert duplicates(guard, 1) == 1  # the first call: runs, no duplicate line
    assert lines.lines == []

    duplicates(guard, 2)
    assert len(lines.lines) == 2
    assert all(line.startswith("mideng duplicate scope=orders key=o-1") for line in lines.lines)

    LOG.setLevel(logging.ERROR)  # clears the cache: the next duplicate asks again
    duplicates(guard, 2)
    assert len(lines.lines) == 2

    LOG.setLevel(logging.WARNING)
    duplicates(guard, 1)
    assert len(lines.lines) == 3

    logging.disable(logging.WARNING)  # the manager's switch, not the logger's level
    duplicates(guard, 1)
    assert len(lines.lines) == 3
    logging.disable(logging.NOTSET)
    duplicates(guard, 1)
    assert len(lines.lines) == 4

    LOG.disabled = True  # as logging.config does to loggers it was not told about
    duplicates(guard, 1)
    assert len(lines.lines) == 4
    LOG.disabled = False
    duplicates(guard, 1)
    assert len(lines.lines) == 5


def test_a_parent_level_change_reaches_the_duplicate_line(lines: Lines) -> None:
    """The "mideng" logger without a level of its own takes the root's: setting the root's
    level clears every logger's cache, "mideng"'s included."""
    guard = Guard(MemoryStore())
    root = logging.getLogger()
    old = root.level
    LOG.setLevel(logging.NOTSET)
    try:
        root.setLevel(logging.WARNING)
        duplicates(guard, 2)  # a first call and a duplicate
        assert len(lines.lines) == 1
        root.setLevel(logging.CRITICAL)
        duplicates(guard, 1)
        assert len(lines.lines) == 1
        root.setLevel(logging.WARNING)
        duplicates(guard, 1)
        assert len(lines.lines) == 2
    finally:
        root.setLevel(old)
