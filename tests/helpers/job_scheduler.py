"""A scheduler process for the storm test: one job every second, its host clock set off.

Arguments: the store's URL, the business database's URL, the tables' suffix, the job's name,
the host clock's offset in seconds, the lease. The job writes a start row (committed at once,
so the test sees who is mid-run), works for a while, then writes its slot's row with its
fence (mideng.state.update_fenced) and a run row saying whether that write was applied, in one
transaction. SIGTERM stops the scheduler once the running job has ended.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from sqlalchemy import create_engine

from mideng import Guard
from mideng.jobs import Job, JobContext, Missed, Scheduler
from mideng.jobs.schedule import Every
from mideng.state import insert_once, update_fenced
from tests.jobs.tables import storm_tables

#: How long a run works between its start row and its fenced write.
WORK = 0.4


def main() -> int:
    store_url, db_url, suffix, name, offset, lease = sys.argv[1:7]
    engine = create_engine(db_url, connect_args={"timeout": 30} if "sqlite" in db_url else {})
    slots, runs, starts = storm_tables(suffix)
    pid = os.getpid()

    def tick(context: JobContext) -> None:
        with engine.begin() as conn:
            conn.execute(starts.insert().values(slot=context.key, pid=pid, fence=context.fence))
        time.sleep(WORK)
        with engine.begin() as conn:
            insert_once(conn, slots, {"slot": context.key}, unique="slot")
            answer = update_fenced(
                conn, slots, {"slot": context.key}, {"pid": pid}, fence=context.fence
            )
            conn.execute(
                runs.insert().values(
                    slot=context.key, pid=pid, fence=context.fence, applied=answer.ok
                )
            )

    guard = Guard(store_url)
    job = Job(name, tick, Every(1), missed=Missed.ALL, lease=float(lease))
    shift = float(offset)
    scheduler = Scheduler(guard, [job], host_clock=lambda: time.time() + shift)
    signal.signal(signal.SIGTERM, lambda *_: scheduler.stop())
    print("ready", flush=True)
    scheduler.run()
    guard.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
