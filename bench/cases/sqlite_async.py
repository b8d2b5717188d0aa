"""The SQLite store's async calls in place, against the same in the executor and sync, timed.

``Guard.arun`` on the SQLite store, which runs its operations on the loop's thread, against
the same calls made in the loop's executor (``inline=False``, what every embedded store did
before) and the sync calls (``Guard.run``), in one run.

    .venv/bin/python -m bench sqlite-async [--calls 200] [--rounds 15]

"first" is a call on a new key (claim, body, completion), "duplicate" a call on a finished key
(one read). Contenders run interleaved, one batch each per round; each figure is the median of
the rounds' per-call means (µs). The duplicate warning log is silenced.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import uuid

from bench.report import parser
from bench.timing import Batch, interleaved
from mideng import Guard
from mideng.stores.sqlite import SQLiteStore


def body() -> dict[str, int]:
    return {"ok": 1}


async def abody() -> dict[str, int]:
    return {"ok": 1}


def contenders(folder: str) -> list[tuple[str, Batch]]:
    cases: list[tuple[str, Batch]] = []
    for label, inline in (("async, in place", True), ("async, in the executor", False)):
        guard = Guard(SQLiteStore(os.path.join(folder, f"{inline}.db"), inline=inline))

        async def firsts(numbers: list[int], guard: Guard = guard) -> None:
            for n in numbers:
                await guard.arun("b", f"k{n}", abody)

        async def duplicates(numbers: list[int], guard: Guard = guard) -> None:
            for _ in numbers:
                await guard.arun("b", "same", abody)

        cases += [(f"{label}, first", firsts), (f"{label}, duplicate", duplicates)]
    sync = Guard(SQLiteStore(os.path.join(folder, "sync.db")))

    async def sync_firsts(numbers: list[int]) -> None:
        for n in numbers:
            sync.run("b", f"k{n}", body)

    async def sync_duplicates(numbers: list[int]) -> None:
        for _ in numbers:
            sync.run("b", "same", body)

    return [*cases, ("sync, first", sync_firsts), ("sync, duplicate", sync_duplicates)]


def main(argv: list[str]) -> None:
    options = parser("sqlite-async", __doc__)
    options.add_argument("--calls", type=int, default=200)
    options.add_argument("--rounds", type=int, default=15)
    args = options.parse_args(argv)
    logging.getLogger("mideng").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix=f"mideng-bench-{uuid.uuid4().hex[:6]}") as folder:
        m = asyncio.run(interleaved(contenders(folder), args.calls, args.rounds))
    load = os.getloadavg()
    cpus = os.cpu_count()
    print(f"{args.rounds} rounds of {args.calls} calls; load average {load[0]:.2f}, {cpus} CPUs\n")
    print("| contender | µs/call | x sync |\n|---|---:|---:|")
    for name, us in m.items():
        sync = m["sync, first"] if name.endswith("first") else m["sync, duplicate"]
        print(f"| {name} | {us:.1f} | {us / sync:.2f} |")
