"""Scheduled jobs, run once per slot across any number of schedulers.

A job's slots start on an interval (``every=``) or at a cron expression's times in a zone
(``cron=``, ``tz=``), measured on the store's clock. Each slot is a guarded call on scope
``job:<name>`` keyed by the slot's start, so it runs at most once whichever schedulers see it;
a holder that dies is taken over after its lease, or left UNKNOWN for a job with external
effects; the run gets its fence to pass to its writes (``mideng.state.update_fenced``). See
docs/jobs.md.
"""

from mideng.jobs.job import Job, JobContext, Jobs, Missed, Overlap
from mideng.jobs.schedule import Cron, Every, Schedule, slot_key
from mideng.jobs.scheduler import Scheduler
from mideng.jobs.slots import Outcome, SlotRun, arun_slot, run_slot

__all__ = [
    "Cron",
    "Every",
    "Job",
    "JobContext",
    "Jobs",
    "Missed",
    "Outcome",
    "Overlap",
    "Schedule",
    "Scheduler",
    "SlotRun",
    "arun_slot",
    "run_slot",
    "slot_key",
]
