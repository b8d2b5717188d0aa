"""``manage.py mideng_reconcile --plan | --apply``: finish the unfinished operations whose
holder is gone, through the functions registered on the project's Guard
(``mideng.contrib.django.guard()``); ``--plan`` says what it would do and changes nothing.
``--import`` names the modules that register them, when nothing at start-up imports them."""

from __future__ import annotations

import importlib
from argparse import ArgumentParser
from typing import Any

from mideng.contrib.django.commands import MidengCommand, positive, problem, usage
from mideng.contrib.django.project import guard
from mideng.errors import one_line
from mideng.operations import reports
from mideng.operations.reconcile import MIN_AGE, needs_attention


class Command(MidengCommand):
    help = "Finish unfinished operations whose holder is gone (--apply), or plan it (--plan)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print one JSON document.")
        what = parser.add_mutually_exclusive_group(required=True)
        what.add_argument(
            "--plan", action="store_true", help="Say what it would do; change nothing."
        )
        what.add_argument("--apply", action="store_true", help="Run them again.")
        parser.add_argument("--scope", default=None, help="Only this scope.")
        parser.add_argument("--limit", type=int, default=100, help="At most this many (100).")
        parser.add_argument(
            "--min-age",
            type=positive,
            default=MIN_AGE,
            help="Seconds an operation is left to its caller's retries (300).",
        )
        parser.add_argument(
            "--import",
            dest="modules",
            action="append",
            default=[],
            help="A module that registers operations (@guard().operation); repeatable.",
        )

    def run(self, **options: Any) -> None:
        for module in options["modules"]:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise usage(f"--import: can't import {module}: {one_line(exc)}") from exc
        if options["limit"] < 1:
            raise usage("--limit must be 1 or more")
        report = guard().reconcile(
            options["scope"], options["limit"], plan=options["plan"], min_age=options["min_age"]
        )
        if options["json"]:
            self.emit(reports.reconciled(report, options["plan"]))
        else:
            for r in report:
                self.stdout.write(f"{r.scope} {r.key} {r.outcome.value} {r.detail}".rstrip())
        if needs_attention(report):
            raise problem("an operation failed or has no registered function here")
