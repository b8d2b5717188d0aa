"""One host running APScheduler 4 with a mideng job every second, for a few seconds; run
with APScheduler 4 first on its path (tests/jobs/test_apscheduler4.py installs it apart).

Arguments: the store's URL, the job's name, the folder each run leaves files in, how many
seconds to run, ``sync`` or ``async`` (Scheduler or AsyncScheduler), and the doomed slot
(seconds; 0 for none): a host that claims it first (fence 1) kills itself with SIGKILL in
the middle of the run, so another host must take it over.

Each run leaves ``start.<slot>.<fence>.<pid>`` when it begins and ``done.<slot>.<fence>.<pid>``
when it ends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from importlib.metadata import version
from pathlib import Path

from apscheduler import AsyncScheduler, Scheduler

from mideng import Guard
from mideng.jobs import Every, Job, JobContext
from mideng.jobs.apscheduler4 import aadd_job, add_job

LEASE = 2.0


def main() -> int:
    store_url, name, folder, seconds, mode, doomed = sys.argv[1:7]
    out = Path(folder)
    assert version("apscheduler").startswith("4."), version("apscheduler")

    def tick(context: JobContext) -> None:
        run = f"{context.key}.{context.fence}.{os.getpid()}"
        (out / f"start.{run}").touch()
        if context.slot.timestamp() == float(doomed) and context.fence == 1:
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
            time.sleep(float(seconds))
    else:

        async def run() -> None:
            async with AsyncScheduler() as scheduler:
                await aadd_job(scheduler, guard, Job(name, atick, Every(1), lease=LEASE))
                await scheduler.start_in_background()
                print("ready", flush=True)
                await asyncio.sleep(float(seconds))
                await scheduler.stop()

        asyncio.run(run())
    guard.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
