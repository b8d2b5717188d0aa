"""``manage.py mideng_stats``: records by scope and status, stuck and UNKNOWN ones; exit 1 if
there are any. ``--json`` prints what ``mideng stats --json`` prints."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from mideng.contrib.django.commands import MidengCommand, positive, problem
from mideng.stores import reports
from mideng.stores.survey import STATUSES


class Command(MidengCommand):
    help = "Records by scope and status, stuck and UNKNOWN ones; exit 1 if there are any."

    def add_arguments(self, parser: ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--json", action="store_true", help="Print JSON.")
        parser.add_argument("--prefix", default=None, help="Only scopes starting with this.")
        parser.add_argument(
            "--grace",
            type=positive,
            default=60.0,
            help="Seconds past its lease before a processing record is stuck (default 60).",
        )
        parser.add_argument(
            "--exact",
            action="store_true",
            help="Count every record (a big table's succeeded records are otherwise estimated).",
        )

    def run(self, **options: Any) -> None:
        prefix, grace = options["prefix"], options["grace"]
        with self.guard(options["store"]) as guard:
            found = reports.surveyed(
                guard.store, prefix, grace, spread=False, exact=options["exact"]
            )
            if options["json"]:
                self.emit(reports.stats(guard.store, found, prefix, grace))
            else:
                self.stdout.write("scope " + " ".join(STATUSES))
                for scope, statuses in sorted(found.by_scope.items()):
                    counts = " ".join(str(statuses.get(status, 0)) for status in STATUSES)
                    self.stdout.write(f"{scope} {counts}")
                if found.unscoped:
                    counts = " ".join(str(found.unscoped.get(s, "-")) for s in STATUSES)
                    self.stdout.write(f"(all scopes) {counts}")
                self.stdout.write(f"total {found.total}")
                note = reports.estimate_note(found)
                if note is not None:
                    self.stdout.write(note)
        if reports.stats_failed(found):
            raise problem(f"{found.stuck_count} stuck and {found.unknown} UNKNOWN record(s)")
