"""Processes opening one brand-new SQLite file at the same moment, as hosts' crontabs starting
``mideng once`` do: every one opens the store, and the tables are made once. The file's switch
to WAL mode takes a lock that SQLite's busy handler does not always wait for, so the switch is
retried with the tables' creation."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from mideng import Guard
from mideng.errors import StoreUnavailableError
from mideng.stores.sqlite import SQLiteStore

PROCESSES = 6
FILES = 12


def _open_and_claim(path: str, n: int, start: Any, answers: Any) -> None:
    start.wait()
    answer: object
    try:
        store = SQLiteStore(path)
        answer = Guard(store).run("pay", f"k{n}", lambda: n)
        store.close()
    except StoreUnavailableError as exc:
        answer = str(exc)
    answers.put((n, answer))


@pytest.mark.slow
def test_processes_opening_a_fresh_file_at_once_all_open_it(tmp_path: Path) -> None:
    fork = multiprocessing.get_context("fork")
    for file in range(FILES):
        path = str(tmp_path / f"fresh{file}.db")
        start, answers = fork.Event(), fork.Queue()
        hosts = [
            fork.Process(target=_open_and_claim, args=(path, n, start, answers))
            for n in range(PROCESSES)
        ]
        for host in hosts:
            host.start()
        start.set()
        got = dict(answers.get(timeout=60) for _ in hosts)
        for host in hosts:
            host.join(60)
        assert got == {n: n for n in range(PROCESSES)}, f"file {file}: {got}"
