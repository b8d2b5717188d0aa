"""SIGTERM while two batches are in flight: the relay process claims nothing more, finishes
both batches (every message they published is written back as sent, their keys let go) and
exits 0; the rows it did not reach are published later, each once, in key order."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from mideng.outbox import Relay
from tests.outbox.conftest import Db
from tests.outbox.recording import Recording

pytestmark = pytest.mark.slow

KEYS, PER_KEY = 20, 10


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_sigterm_with_two_batches_in_flight_writes_both_back_and_exits_0(
    server_db: Db, tmp_path: Path
) -> None:
    db = server_db
    ids: dict[str, tuple[int, int]] = {}
    with db.engine.begin() as connection:
        for n in range(PER_KEY):
            for k in range(KEYS):
                message_id = db.outbox.add(connection, "orders", {"k": k, "n": n}, key=f"o:{k}")
                ids[message_id] = (k, n)
    published, marks = tmp_path / "published.log", tmp_path / "marks.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    url = db.engine.url.render_as_string(hide_password=False)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.outbox.term_proc",
            url,
            db.table,
            str(published),
            str(marks),
            "0.02",
        ],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        deadline = time.monotonic() + 60
        # Two batches of 5 keys, 10 rows a key at 20 ms a publish: each runs about 0.2 s.
        while _lines(marks).count("start 2") == 0 or len(_lines(published)) < 5:
            assert process.poll() is None, "the relay process died"
            assert time.monotonic() < deadline, "two batches never got in flight"
            time.sleep(0.005)
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)

    lines = _lines(marks)
    term = lines.index("term")
    started = {line.split()[1] for line in lines[:term] if line.startswith("start")}
    assert {"1", "2"} <= started
    unfinished_at_term = started - {
        line.split()[1] for line in lines[:term] if line.startswith("end")
    }
    assert len(unfinished_at_term) >= 1  # a batch was in flight when SIGTERM came...
    assert not [line for line in lines[term:] if line.startswith("start")]  # ...none claimed after
    ended = {line.split()[1] for line in lines if line.startswith("end")}
    assert started <= ended  # every batch in hand was finished
    # Everything it published is written back; its keys are let go; nothing else is sent.
    sent_by_process = _lines(published)
    assert len(set(sent_by_process)) == len(sent_by_process)
    states = {row["id"]: row["state"] for row in db.rows()}
    assert {i for i, state in states.items() if state == 1} == set(sent_by_process)
    assert all(key["claimed_by"] is None for key in db.key_rows())
    assert len(sent_by_process) < len(ids)  # it stopped before the end

    publisher = Recording()

    async def rest() -> None:
        async with Relay(db.engine, publisher, table=db.table, listen=False) as relay:
            await relay.run_once()

    asyncio.run(rest())
    everything = sent_by_process + [message.message_id for message in publisher.sent]
    assert Counter(everything) == Counter(list(ids))  # each once: nothing repeated, nothing lost
    per_key: dict[int, list[int]] = {}
    for message_id in everything:
        k, n = ids[message_id]
        per_key.setdefault(k, []).append(n)
    assert all(ns == list(range(PER_KEY)) for ns in per_key.values())
    assert all(row["state"] == 1 for row in db.rows())
