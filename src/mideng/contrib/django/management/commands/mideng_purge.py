"""``manage.py mideng_purge``: delete records whose retention ran out (run it on a schedule),
as ``mideng purge`` does."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from mideng.contrib.django.commands import MidengCommand, positive
from mideng.stores import reports


def _count(text: str) -> int:
    number = int(text)
    if number < 0:
        raise ValueError(text)
    return number


class Command(MidengCommand):
    help = "Delete records whose retention ran out."

    def add_arguments(self, parser: ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--json", action="store_true", help="Print JSON.")
        parser.add_argument("--limit", type=_count, default=None, help="Delete at most this many.")
        parser.add_argument(
            "--older-than",
            type=positive,
            default=None,
            help="Seconds: also delete finished records last written longer ago, whatever "
            "their retention (processing and UNKNOWN records are never touched).",
        )

    def run(self, **options: Any) -> None:
        older_than = options["older_than"]
        with self.guard(options["store"]) as guard:
            total = reports.purge(guard.store, options["limit"], older_than)
            if options["json"]:
                self.emit(reports.purged(guard.store, total, older_than))
            else:
                self.stdout.write(reports.purged_line(guard.store, total, older_than))
