"""A service's jobs, for the ``mideng jobs`` tests: a slow job every second that leaves a
file per slot (in MIDENG_TEST_JOBS_DIR), and a daily report on a cron expression."""

from __future__ import annotations

import os
import time
from pathlib import Path

from mideng.jobs import JobContext, Jobs

jobs = Jobs()
not_jobs = 42


@jobs.job("tick", every=1)
def tick(context: JobContext) -> None:
    out = Path(os.environ["MIDENG_TEST_JOBS_DIR"])
    (out / f"{context.key}.started").write_text(str(context.fence))
    time.sleep(0.6)
    (out / f"{context.key}.ended").write_text(str(context.fence))


@jobs.job("report", cron="0 6 * * *", tz="Asia/Shanghai", external_effects=True)
def report(context: JobContext) -> None:
    pass
