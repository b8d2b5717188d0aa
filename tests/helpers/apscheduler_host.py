"""One host running APScheduler 3 with a mideng job every second, for a few seconds.

Arguments: the store's URL, the job's name, the folder each run leaves a file in
(``<slot>.<pid>``), how many seconds to run, and ``async`` or ``sync`` (AsyncIOScheduler or
BackgroundScheduler).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.schedulers.background import BackgroundScheduler

from mideng import Guard
from mideng.jobs import Every, Job, JobContext
from mideng.jobs.apscheduler import add_job


def main() -> int:
    store_url, name, folder, seconds, mode = sys.argv[1:6]
    out = Path(folder)

    def tick(context: JobContext) -> None:
        (out / f"{context.key}.{os.getpid()}").write_text(str(context.fence))

    async def atick(context: JobContext) -> None:
        tick(context)

    guard = Guard(store_url)
    if mode == "sync":
        scheduler = BackgroundScheduler()
        add_job(scheduler, guard, Job(name, tick, Every(1)))
        scheduler.start()
        print("ready", flush=True)
        time.sleep(float(seconds))
        scheduler.shutdown(wait=True)
    else:

        async def run() -> None:
            scheduler = AsyncIOScheduler()
            add_job(scheduler, guard, Job(name, atick, Every(1)), use_async=True)
            scheduler.start()
            print("ready", flush=True)
            await asyncio.sleep(float(seconds))
            scheduler.shutdown(wait=True)

        asyncio.run(run())
    guard.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
