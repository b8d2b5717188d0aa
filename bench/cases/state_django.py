"""The state primitives on a Django model against Django's ORM doing the same update, counted.

    .venv/bin/python -m bench state-django [--calls 300]

``decrement(connection, Stock, pk, "qty", 1)`` against ``Stock.objects.filter(pk=pk,
qty__gte=1).update(qty=F("qty") - 1)``, and ``StateMachine.advance`` against
``filter(pk=pk, status__in=[…]).update(status=…)``: the same one conditional UPDATE on the
happy path (the ORM's answers only the row count; mideng's tell a miss apart with a read,
which the happy path never sends). Each case runs in a child process under callgrind with
100 and 100 + ``--calls`` calls inside one atomic block on SQLite (bench/callgrind.py); the
client's instructions only.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.callgrind import child_call, instructions_per_call, need_valgrind
from bench.report import parser

BASE = 100
CASES = ("orm decrement", "mideng decrement", "orm advance", "mideng advance")


def child(case: str, calls: int) -> None:
    import django
    from django.conf import settings

    with tempfile.TemporaryDirectory() as tmp:
        database = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(Path(tmp) / "bench.db")}
        settings.configure(SECRET_KEY="bench", USE_TZ=True, DATABASES={"default": database})
        django.setup()
        _calls(case, calls)


def _calls(case: str, calls: int) -> None:
    from django.db import connection, models, transaction

    from mideng.state import StateMachine, decrement

    class Stock(models.Model):
        qty: Any = models.IntegerField()
        status: Any = models.CharField(max_length=10)

        class Meta:
            app_label = "bench"

    with connection.schema_editor() as editor:
        editor.create_model(Stock)
    pk = Stock.objects.create(qty=10**9, status="A").pk
    flow = StateMachine({"A": ["B"], "B": ["A"]})
    rows = Stock.objects.filter
    with transaction.atomic():
        for i in range(calls):
            to, back = ("B", "A") if i % 2 == 0 else ("A", "B")
            if case == "orm decrement":
                rows(pk=pk, qty__gte=1).update(qty=models.F("qty") - 1)
            elif case == "mideng decrement":
                decrement(connection, Stock, pk, "qty", 1)
            elif case == "orm advance":
                rows(pk=pk, status__in=[back]).update(status=to)
            else:
                flow.advance(connection, Stock, pk, to)


def main(argv: list[str]) -> None:
    options = parser("state-django", __doc__)
    options.add_argument("--calls", type=int, default=300)
    args = options.parse_args(argv)
    need_valgrind("state-django")
    counts = {
        case: instructions_per_call(__spec__.name, case, args.calls, BASE) / 1000 for case in CASES
    }
    for what in ("decrement", "advance"):
        orm, ours = counts[f"orm {what}"], counts[f"mideng {what}"]
        print(
            f"SQLite {what} on a Django model, thousands of instructions per call: ORM update "
            f"{orm:.1f}, mideng {ours:.1f} ({ours / orm:.2f}x)"
        )


if __name__ == "__main__":  # the child instructions_per_call counts
    child(*child_call(sys.argv[1:]))
