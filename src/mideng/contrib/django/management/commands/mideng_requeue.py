"""``manage.py mideng_requeue``: put dead outbox rows back to pending, by id or every dead row
of ``--destination``, each only while it is still as read just before; as ``mideng outbox
requeue`` does (mideng.outbox.dead, the same words and JSON). A row another operator or a
relay changed meanwhile is reported and the command exits 1. The database is MIDENG's (its
``database`` alias), the table MIDENG's ``outbox``; ``--db`` and ``--table`` name others."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from mideng.contrib.django.commands import MidengCommand, problem, usage
from mideng.contrib.django.settings import config, database_url
from mideng.outbox import dead
from mideng.stores.sql.engines import engine_for


class Command(MidengCommand):
    help = "Put dead outbox rows back to pending (by ID, or every dead row of --destination)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("ids", nargs="*", metavar="ID", help="Dead rows' ids.")
        parser.add_argument("--destination", default=None, help="Every dead row to it.")
        parser.add_argument("--dry-run", action="store_true", help="Say what; change nothing.")
        parser.add_argument("--json", action="store_true", help="Print JSON.")
        parser.add_argument("--db", default=None, help="Database URL (default: MIDENG's).")
        parser.add_argument("--table", default=None, help="Outbox table (default: MIDENG's).")

    def run(self, **options: Any) -> None:
        ids, destination = list(options["ids"]), options["destination"]
        if bool(ids) == (destination is not None):
            raise usage("give row IDs or --destination, not both and not neither")
        settings = config()
        engine = engine_for(options["db"] or database_url(settings.database))
        dry_run = options["dry_run"]
        try:
            answers = dead.requeue_as_read(
                engine, ids, destination, dry_run=dry_run, table=options["table"] or settings.outbox
            )
        finally:
            engine.dispose()
        if options["json"]:
            self.emit(dead.report(answers, dry_run))
        else:
            for text in dead.lines(answers, dry_run):
                self.stdout.write(text)
        if not dead.all_done(answers):
            raise problem("not every row asked for was requeued: changed meanwhile")
