"""core's contenders counted in instructions per call, under callgrind.

    .venv/bin/python -m bench core-python [--calls 2000] [CASE ...]

A CASE is a contender and a kind: ``minimal d``, ``raw d``, ``sqlite d``, ``memory d`` (a
duplicate) or the same with ``f`` (a first call); all eight by default. Each runs in a child
process under ``valgrind --tool=callgrind`` twice, with 500 and 500 + ``--calls`` calls; the
difference divided by ``--calls`` is one call, interpreter, sqlite3 module and SQLite library
included (what the timed case's load average moves, this does not). Figures in thousands.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path

from bench.callgrind import child_call, instructions_per_call, need_valgrind
from bench.cases import core
from bench.report import parser

CASES = ("minimal d", "raw d", "sqlite d", "memory d", "minimal f", "raw f", "sqlite f", "memory f")
BASE = 500


def child(case: str, calls: int) -> None:
    from mideng import Guard
    from mideng.stores.memory import MemoryStore
    from mideng.stores.sqlite import SQLiteStore

    logging.getLogger("mideng").setLevel(logging.ERROR)  # as the timed case does
    name, kind = case.split()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        if name == "minimal":
            first, duplicate = core.minimal(where / "min.db")
        elif name == "raw":
            first, duplicate = core.store_table(where / "raw.db")
        elif name == "sqlite":
            first, duplicate = core.guarded(Guard(SQLiteStore(str(where / "m.db"))))
        elif name == "memory":
            first, duplicate = core.guarded(Guard(MemoryStore()))
        else:
            raise SystemExit(f"unknown case {case!r}")
        call = first if kind == "f" else duplicate
        for i in range(200):  # warm-up: the SQLite store learns the scope's claim order here
            call(f"w{i}")
        for i in range(calls):
            call(f"k{i}")


def main(argv: list[str]) -> None:
    options = parser("core-python", __doc__)
    options.add_argument("--calls", type=int, default=2000)
    options.add_argument("cases", nargs="*", help="e.g. 'sqlite d' (default: all)")
    args = options.parse_args(argv)
    need_valgrind("core-python")
    for case in args.cases or CASES:
        count = instructions_per_call(__spec__.name, case, args.calls, BASE)
        print(f"{case}: {count / 1000:.1f} thousand instructions per call", flush=True)


if __name__ == "__main__":  # the child instructions_per_call counts
    child(*child_call(sys.argv[1:]))
