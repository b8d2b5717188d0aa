"""One host running APScheduler 4 with a mideng job every second, for a few seconds; run
with APScheduler 4 first on its path (tests/jobs/test_apscheduler4.py installs it apart).

Arguments: the store's URL, the job's name, the folder each run leaves files in, and
``sync`` or ``async`` (Scheduler or AsyncScheduler). Once ready, the host reads the doomed
slot (seconds) from its standard input: a host that claims it first (fence 1) kills itself
with SIGKILL in the middle of the run, so another host must take it over. It runs until its
standard input ends.

Each run leaves ``start.<slot>.<fence>.<pid>`` when it begins and ``done.<slot>.<fence>.<pid>``
when it ends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from importlib.metadata import version
from pathlib import Path

from apscheduler import AsyncScheduler, Scheduler

from mideng import Guard
from mideng.jobs import Every, Job, JobContext
from mideng.jobs.apscheduler4 import aadd_job, add_job

LEASE = 2.0


def main() -> int:
    store_url, name, folder, mode = sys.argv[1:5]
    out = Path(folder)
    doomed: list[float] = []
    assert version("apscheduler").startswith("4."), version("apscheduler")

    def tick(context: JobContext) -> None:
        run = f"{context.key}.{context.fence}.{os.getpid()}"
        (out / f"start.{run}").touch()
        if context.slot.timestamp() in doomed and context.fence == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # a host dying mid-run, holding the slot
        (out / f"done.{run}").touch()

    async def atick(context: JobContext) -> None:
        tick(context)

    guard = Guard(store_url)
    if mode == "sync":
        with Scheduler() as scheduler:
            add_job(scheduler, guard, Job(name, tick, Every(1), lease=LEASE))
            scheduler.start_in_background()
            print("ready", flush=True)
            doomed.append(float(sys.stdin.readline()))
            sys.stdin.read()
    else:

        async def run() -> None:
            async with AsyncScheduler() as scheduler:
                await aadd_job(scheduler, guard, Job(name, atick, Every(1), lease=LEASE))
                await scheduler.start_in_background()
                print("ready", flush=True)
                doomed.append(float(await asyncio.to_thread(sys.stdin.readline)))
                await asyncio.to_thread(sys.stdin.read)
                await scheduler.stop()

        asyncio.run(run())
    guard.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
