"""The storm: three scheduler processes on one job every second, each with its host clock
set up to two seconds off, one killed with SIGKILL mid-run and one stopped with SIGSTOP past
its lease and then continued. Every slot of ten runs exactly once (one applied fenced write
each, counted in the table the job writes), and the stopped holder's late write is refused.
On the SQLite, PostgreSQL and Redis stores."""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import MetaData, create_engine, select
from sqlalchemy.engine import Engine

from mideng import open_store
from mideng.jobs import slot_key
from mideng.schema.tables import audit_table, records
from tests.jobs.hosts import ready_hosts
from tests.jobs.tables import storm_tables
from tests.services import POSTGRES_URL, REDIS_URL, need

pytestmark = pytest.mark.slow

WORKER = Path(__file__).parents[1] / "helpers" / "job_scheduler.py"
LEASE = 1.5
# Enough slots for a kill, then a pause past the lease, then a take-over, all mid-window.
SLOTS = 10
OFFSETS = (-2.0, 1.3, 2.0)  # each process's host clock, seconds off the true time


@dataclass
class Storm:
    store_url: str
    db_url: str
    suffix: str
    engine: Engine
    metadata: MetaData


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def storm(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storm]:
    name = str(request.param)
    suffix = uuid.uuid4().hex[:10]
    sqlite_db = f"sqlite:///{tmp_path / 'business.db'}"
    if name == "sqlite":
        store_url, db_url = f"sqlite:///{tmp_path / 'store.db'}", sqlite_db
    elif name == "postgresql":
        need("postgresql")
        # A record table of its own: what the shared default table holds is no concern of it.
        store_url, db_url = f"{POSTGRES_URL}?table=jobs_{suffix}", POSTGRES_URL
    else:
        need("redis")
        store_url, db_url = REDIS_URL, sqlite_db
    engine = create_engine(db_url)
    if name != "postgresql":
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
    metadata = MetaData()
    storm_tables(suffix, metadata)
    metadata.create_all(engine)
    yield Storm(store_url, db_url, suffix, engine, metadata)
    metadata.drop_all(engine)
    if name == "postgresql":  # the store's own tables: the records', its steps' and audit's
        with engine.begin() as conn:
            made = records(f"jobs_{suffix}")
            for table in (*reversed(made.tables), audit_table(made.name)):
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
    engine.dispose()


def until(found: Callable[[], Any], seconds: float, what: str) -> Any:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        value = found()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _running(found: tuple[int, str]) -> tuple[int, str] | None:
    return found if found[0] else None


def test_every_slot_runs_exactly_once_through_a_kill_and_a_pause(storm: Storm) -> None:
    slots, runs, starts = storm_tables(storm.suffix, MetaData())
    job = f"storm_{storm.suffix}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    argv = [sys.executable, str(WORKER), storm.store_url, storm.db_url, storm.suffix, job]
    commands = [[*argv, str(offset), str(LEASE)] for offset in OFFSETS]
    with ready_hosts(commands, env) as procs:
        store = open_store(storm.store_url)
        first = float(int(store.now())) + 2.0  # every scheduler is up by then
        store.close()
        window = [slot_key(first + n) for n in range(SLOTS)]

        def mid_run(at_least: str, besides: set[int]) -> tuple[int, str]:
            """A process that has started a slot at or after ``at_least`` and not ended it."""
            with storm.engine.connect() as conn:
                started = conn.execute(
                    select(starts.c.pid, starts.c.slot).where(starts.c.slot >= at_least)
                ).all()
                ended = set(conn.execute(select(runs.c.pid, runs.c.slot)).all())
            for pid, slot in started:
                if pid not in besides and (pid, slot) not in ended:
                    return pid, slot
            return 0, ""

        pids = {proc.pid for proc in procs}
        killed, killed_slot = until(
            lambda: mid_run(window[2], set())[0] and mid_run(window[2], set()), 20, "a run to kill"
        )
        os.kill(killed, signal.SIGKILL)
        paused, paused_slot = until(
            lambda: mid_run(window[5], {killed})[0] and mid_run(window[5], {killed}),
            20,
            "a run to pause",
        )
        os.kill(paused, signal.SIGSTOP)

        def taken_over() -> bool:
            """Another scheduler ran the paused slot to its end, fenced write and all."""
            with storm.engine.connect() as conn:
                return bool(
                    conn.execute(
                        select(runs.c.id).where(runs.c.slot == paused_slot, runs.c.pid != paused)
                    ).all()
                )

        # Its lease runs out, another scheduler takes the slot over and writes it; only then
        # does the paused holder wake, so its write comes late.
        until(taken_over, 20, "the paused slot taken over")
        os.kill(paused, signal.SIGCONT)

        def all_written() -> bool:
            with storm.engine.connect() as conn:
                done = {row[0] for row in conn.execute(select(slots.c.slot))}
                late = conn.execute(
                    select(runs.c.id).where(runs.c.pid == paused, runs.c.slot == paused_slot)
                ).all()
            return set(window) <= done and bool(late)

        until(all_written, 40, "every slot of the window written")
        live = [proc for proc in procs if proc.pid != killed]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        for proc in live:
            assert proc.wait(20) == 0
        assert pids == {proc.pid for proc in procs}

        with storm.engine.connect() as conn:
            applied = conn.execute(
                select(runs.c.slot, runs.c.pid, runs.c.fence).where(runs.c.applied.is_(True))
            ).all()
            refused = conn.execute(
                select(runs.c.slot, runs.c.pid, runs.c.fence).where(runs.c.applied.is_(False))
            ).all()
            written = {row.slot: (row.pid, row.fence) for row in conn.execute(select(slots))}
        per_slot: dict[str, list[tuple[int, int]]] = {}
        for slot, pid, fence in applied:
            per_slot.setdefault(slot, []).append((pid, fence))
        for slot in window:
            assert len(per_slot.get(slot, [])) == 1, (slot, per_slot.get(slot))
            assert written[slot] == per_slot[slot][0]
        # The killed holder's slot was taken over (fence 2) by a live scheduler.
        assert written[killed_slot][0] != killed
        assert written[killed_slot][1] >= 2
        # The paused holder woke, wrote late with its old fence, and was refused.
        assert [(s, p) for s, p, _ in refused] == [(paused_slot, paused)]
        assert refused[0][2] < written[paused_slot][1]
        assert written[paused_slot][0] != paused
