"""APScheduler 3 hosts running one mideng job: its trigger fires at the job's slot starts,
a fire means the slot nearest the store's clock, and three hosts (processes, blocking and
asyncio schedulers) run each slot once."""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from mideng import Guard
from mideng.core import effects
from mideng.jobs import Cron, Every, Job
from mideng.jobs.slots import nearest
from mideng.stores.memory import MemoryStore
from tests.jobs.hosts import ready_hosts

pytest.importorskip("apscheduler")

from mideng.jobs.apscheduler import SlotTrigger

HOST = Path(__file__).parents[1] / "helpers" / "apscheduler_host.py"
UTC = timezone.utc


def test_the_trigger_fires_at_slot_starts() -> None:
    trigger = SlotTrigger(Every(10))
    on_slot = datetime.fromtimestamp(1_800_000_000, UTC)
    assert trigger.get_next_fire_time(None, on_slot) == on_slot
    later = datetime.fromtimestamp(1_800_000_003.5, UTC)
    assert trigger.get_next_fire_time(None, later).timestamp() == 1_800_000_010
    assert trigger.get_next_fire_time(on_slot, later).timestamp() == 1_800_000_010
    # Crontab's weekdays (0 = Sunday) and zone: Sunday 06:00 in Shanghai is 22:00 UTC Saturday.
    weekly = SlotTrigger(Cron("0 6 * * 0", "Asia/Shanghai"))
    start = datetime(2026, 12, 7, tzinfo=UTC)  # a Monday
    assert weekly.get_next_fire_time(None, start) == datetime(2026, 12, 12, 22, tzinfo=UTC)


def test_a_fire_means_the_slot_nearest_the_store_clock() -> None:
    clock = [1_800_000_003.0]
    store = MemoryStore(lambda: clock[0])
    job = Job("n", lambda context: None, Every(10))
    assert effects.run(nearest(store, job, 5.0)) == 1_800_000_000  # fired 3 s late
    clock[0] = 1_800_000_009.8  # fired 0.2 s early by the store's clock: the next slot
    began = time.monotonic()
    assert effects.run(nearest(store, job, 5.0)) == 1_800_000_010
    assert time.monotonic() - began >= 0.19  # it waited for that slot to start
    clock[0] = 1_800_000_004.0  # 6 s before the next slot: beyond the tolerance
    assert effects.run(nearest(store, job, 5.0)) == 1_800_000_000
    assert effects.run(nearest(store, job, 30.0)) == 1_800_000_000  # and half a period


@pytest.mark.slow
def test_three_apscheduler_hosts_run_each_slot_once(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    out.mkdir()
    store = f"sqlite:///{tmp_path / 'store.db'}"
    name = f"aps{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    argv = [sys.executable, str(HOST), store, name, str(out), "4"]
    with ready_hosts([[*argv, mode] for mode in ("sync", "sync", "async")], env) as hosts:
        for host in hosts:
            assert host.wait(30) == 0
    runs = Counter(path.name.rsplit(".", 1)[0] for path in out.iterdir())
    assert len(runs) >= 3
    assert set(runs.values()) == {1}, runs
    starts = sorted(datetime.strptime(k, "%Y-%m-%dT%H:%M:%S%z").timestamp() for k in runs)
    assert starts == [starts[0] + n for n in range(len(starts))]


def test_a_slot_held_by_a_dead_host_is_taken_over_when_its_lease_ends(tmp_path: Path) -> None:
    from apscheduler.schedulers.background import BackgroundScheduler

    from mideng.core.record import ClaimRequest, ExpiryPolicy
    from mideng.jobs import JobContext, slot_key
    from mideng.jobs.apscheduler import add_job

    guard = Guard(f"sqlite:///{tmp_path / 'store.db'}")
    fences: list[int] = []
    done = threading.Event()

    def tick(context: JobContext) -> None:
        fences.append(context.fence)
        done.set()

    job = Job(f"held{uuid.uuid4().hex[:6]}", tick, Every(3600))
    left = job.schedule.after(job.schedule.slot_at(guard.store.now())) - guard.store.now()
    if left < 10:  # a fire this close to the next slot would mean that one
        time.sleep(left + 0.1)
    slot = job.schedule.slot_at(guard.store.now())
    req = ClaimRequest(
        job.scope, slot_key(slot), "dead-host", 1.0, 600.0, None, ExpiryPolicy.TAKE_OVER
    )
    assert guard.store.claim(req).acquired  # a host that claimed the slot, then died
    scheduler = BackgroundScheduler()
    scheduler.start()
    try:
        aps_job = add_job(scheduler, guard, job, next_run_time=datetime.now(UTC))
        assert done.wait(10)
        assert aps_job.id == job.name
    finally:
        scheduler.shutdown(wait=True)
        guard.close()
    assert fences == [2]  # taken over, once
