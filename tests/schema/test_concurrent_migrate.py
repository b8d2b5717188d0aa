"""Two ``mideng migrate`` processes started together on one database: one applies, the other
waits for the set's lock and then finds nothing to do.

The one that takes the lock first is held in its migration by a transaction this test keeps
open on the steps table (PostgreSQL's concurrent index build waits for it, MariaDB's ALTER
TABLE for its metadata lock, SQLite for its write lock), so the other surely meets the lock
taken; the test lets go once one of them says it is waiting."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Any

from click.testing import CliRunner
from sqlalchemy import text

from mideng.cli import main
from mideng.schema import CURRENT
from tests.schema.conftest import Db

WAITING = "waiting for another migration"


def _start(db: Db) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "mideng", "migrate", "--db", db.url, "--table", db.records]
    return subprocess.Popen(
        [*argv, "--lock-timeout", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )


class Stderr:
    """A process's stderr read as it comes, so a test can wait for a line."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert process.stderr is not None
        stream = process.stderr
        self.reader = threading.Thread(target=lambda: self.lines.extend(stream), daemon=True)
        self.reader.start()

    def text(self) -> str:
        return "".join(self.lines)


def _hold(db: Db) -> Any:
    """An open transaction that wrote to the steps table: what a migration waits for."""
    conn = db.engine.connect()
    if db.family == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # SQLite's one write lock
    else:
        conn.begin()
    k = "`key`" if db.family == "mysql" else "key"
    conn.execute(
        text(
            f"INSERT INTO {db.records}_steps (scope, {k}, step, codec, at) "
            "VALUES ('s', 'held', '', 'json', 1)"
        )
    )
    return conn


def test_two_migrations_at_once_one_applies_the_other_waits_then_has_nothing_to_do(
    db: Db,
) -> None:
    prepared = CliRunner().invoke(
        main, ["migrate", "--db", db.url, "--table", db.records, "--to", "1"]
    )
    assert prepared.exit_code == 0, prepared.output
    held = _hold(db)
    processes = [_start(db), _start(db)]
    errors = [Stderr(p) for p in processes]
    # On SQLite the test's own write lock holds both at the lock (a busy wait says nothing
    # until a try gives up), on a server only the one that did not take it.
    told = 2 if db.family == "sqlite" else 1
    try:
        deadline = time.monotonic() + 60
        while sum(WAITING in e.text() for e in errors) < told:
            assert time.monotonic() < deadline, [e.text() for e in errors]
            assert all(p.poll() is None for p in processes), [e.text() for e in errors]
            time.sleep(0.05)
    finally:
        if db.family == "sqlite":
            held.exec_driver_sql("ROLLBACK")
        else:
            held.rollback()
        held.close()
    outputs = []
    for process, error in zip(processes, errors, strict=True):
        out, _ = process.communicate(timeout=60)
        error.reader.join(10)
        assert process.returncode == 0, (out, error.text())
        outputs.append((out, error.text()))
    applied = [o for o in outputs if f"applied {CURRENT}:" in o[0]]
    idle = [o for o in outputs if f"at version {CURRENT}, nothing to do" in o[0]]
    assert len(applied) == 1, outputs
    assert len(idle) == 1, outputs
    assert WAITING in idle[0][1]
    assert "applied" not in idle[0][0]
    assert db.versions() == list(range(1, CURRENT + 1))
