"""``python manage.py run_jobs``: the scheduler of the shop's jobs (orders.jobs), on every
instance, until SIGTERM or Ctrl-C (a running job ends first). Each slot runs once across
them: its claim is a record in the shop's database."""

from __future__ import annotations

import signal
from typing import Any

from django.core.management.base import BaseCommand

from mideng.contrib.django import guard
from mideng.jobs import Scheduler
from orders.jobs import jobs


class Command(BaseCommand):
    help = "Run the shop's scheduled jobs, each slot once across every instance."

    def handle(self, *args: Any, **options: Any) -> None:
        scheduler = Scheduler(guard(), jobs)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: scheduler.stop())
        self.stdout.write(f"scheduling {', '.join(job.name for job in jobs)}")
        scheduler.run()
        self.stdout.write("stopped")
