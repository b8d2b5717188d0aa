"""Python instructions per guarded call, counted, with the database driver stubbed out.

    .venv/bin/python -m bench python [--calls 5000] [--async] [--metrics]
    .venv/bin/python -m bench python-async [--calls 5000]      # the same as --async

Wall-clock ratios on a shared VM move with where the OS runs client and server (see the sql
case); instruction counts do not. Each case runs in a child process under
``valgrind --tool=callgrind`` twice, with 1000 and 1000 + ``--calls`` calls; the difference
divided by ``--calls`` is the instructions one call executes, interpreter included. Hash
randomisation is off, so reruns agree to within a fraction of a percent.

The SQL store runs on PostgreSQL statements, its cursor replaced by a stub that answers each
statement instantly with the row PostgreSQL would send (psycopg's binary types). The floor is
the raw scheme's Python on the same stub: ``execute`` + ``fetchone`` + ``json.loads`` for a
duplicate, two ``execute`` calls + ``json.dumps`` for a first call. What is left over is
what mideng adds per call in Python: Guard, claim decision, codec, typed result, store rows.
No database is needed; valgrind is (``apt install valgrind``).

``--async``: the same calls through ``Guard.arun`` on the store's async executor, its cursor
an awaitable stub answering the same rows, every call awaited on one event loop; the floor is
the raw scheme awaited on the same stub.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
import time
from typing import Any

from bench.callgrind import child_call, instructions_per_call, need_valgrind
from bench.contenders import RESULT
from bench.report import RESULTS, command, parser, write
from bench.stubs import AsyncStub, Stub

BASE = 1000
CASES = ("floor duplicate", "mideng duplicate", "floor first", "mideng first")
FLOOR_INSERT = "INSERT INTO t VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
FLOOR_UPDATE = "UPDATE t SET status = 'succeeded', result = %s WHERE scope = %s AND key = %s"
SELECT = "SELECT * FROM t WHERE scope = %s AND key = %s"


def pay(order: str) -> dict[str, str]:
    return RESULT


async def apay(order: str) -> dict[str, str]:
    return RESULT


def child(case: str, calls: int) -> None:
    """Run ``calls`` calls of ``case``; everything before the loop is the same for both
    counts, so it cancels out."""
    import logging

    from mideng import Guard
    from mideng.stores.sql import SQLStore

    logging.getLogger("mideng").setLevel(logging.ERROR)
    now = time.time()
    result = json.dumps(RESULT, separators=(",", ":")).encode()
    # The row PostgreSQL sends for the store's read: the record after scope and key, then the
    # clock; and for an insert or a completion, the stamp they return.
    stored = (
        "succeeded",
        1,
        "o-1",
        None,
        None,
        result,
        "json",
        None,
        1,
        None,
        now,
        now,
        now + 86400,
        now,
    )
    recording = os.environ.get("MIDENG_BENCH_METRICS")  # --metrics / --metrics-counts
    after = os.environ.get("MIDENG_BENCH_AFTER_DISABLE")  # --after-disable
    if after == "new":  # metrics on and off again before this store was made
        switch_metrics_on_and_off()
    store = SQLStore(
        "postgresql://stub@127.0.0.1/stub", create_schema=False, read_first="duplicate" in case
    )
    store.executor.first = store.aexecutor.first = None  # no schema behind the stub to check
    guard = Guard(store, heartbeat=True)
    if after == "same":  # metrics on and off again with this store in use
        switch_metrics_on_and_off()
    if recording:
        from prometheus_client import CollectorRegistry

        from mideng.observability import metrics

        metrics.enable(CollectorRegistry(), durations=recording == "1")
    if os.environ.get("MIDENG_BENCH_ASYNC"):  # --async
        asyncio.run(acalls(case, calls, guard, AsyncStub([stored]), AsyncStub([(now,)])))
        return
    reads, writes = Stub([stored]), Stub([(now,)])
    store.executor.cache.free.append((None, reads if "duplicate" in case else writes))
    if case.startswith("mideng"):  # the path measured is the one meant: a replay, a new claim
        claim = store.claim(guard.prepare("bench", "k", pay, None).request())
        assert claim.outcome.value == ("replay" if "duplicate" in case else "acquired"), claim
        assert guard.run("bench", "k", pay, "k") == RESULT
    if case == "floor duplicate":
        for _ in range(calls):
            reads.execute(SELECT, ("raw", "k"))
            json.loads(reads.fetchone()[5])
    elif case == "mideng duplicate":
        for _ in range(calls):
            guard.run("bench", "k", pay, "k")
    elif case == "floor first":
        for _ in range(calls):
            t = time.time()
            writes.execute(FLOOR_INSERT, ("raw", "k", "o", t + 60, t, t, t + 86460))
            writes.execute(FLOOR_UPDATE, (json.dumps(RESULT).encode(), "raw", "k"))
    elif case == "mideng first":
        for _ in range(calls):
            guard.run("bench", "k", pay, "k")  # the stub says every insert is new
    else:
        raise SystemExit(f"unknown case {case!r}")


def switch_metrics_on_and_off() -> None:
    """``metrics.enable()`` then ``disable()``, with a Guard on a store of the bench's class
    made in between."""
    from prometheus_client import CollectorRegistry

    from mideng import Guard
    from mideng.observability import metrics
    from mideng.stores.sql import SQLStore

    metrics.enable(CollectorRegistry())
    Guard(SQLStore("postgresql://stub@127.0.0.1/other", create_schema=False))
    metrics.disable()


async def acalls(case: str, calls: int, guard: Any, reads: AsyncStub, writes: AsyncStub) -> None:
    """``child``'s calls, awaited: the store's async executor holds the stub as the running
    loop's one idle connection (its engine made, never connected)."""
    store = guard.store
    entry = await store.aexecutor.loop_engine()
    entry.cache.free.append((None, reads if "duplicate" in case else writes))
    if case.startswith("mideng"):
        claim = await store.aclaim(guard.prepare("bench", "k", apay, None).request())
        assert claim.outcome.value == ("replay" if "duplicate" in case else "acquired"), claim
        assert await guard.arun("bench", "k", apay, "k") == RESULT
    if case == "floor duplicate":
        for _ in range(calls):
            await reads.execute(SELECT, ("raw", "k"))
            json.loads((await reads.fetchone())[5])
    elif case == "mideng duplicate":
        for _ in range(calls):
            await guard.arun("bench", "k", apay, "k")
    elif case == "floor first":
        for _ in range(calls):
            t = time.time()
            await writes.execute(FLOOR_INSERT, ("raw", "k", "o", t + 60, t, t, t + 86460))
            await writes.execute(FLOOR_UPDATE, (json.dumps(RESULT).encode(), "raw", "k"))
    elif case == "mideng first":
        for _ in range(calls):
            await guard.arun("bench", "k", apay, "k")
    else:
        raise SystemExit(f"unknown case {case!r}")
    entry.cache.free.clear()  # the stub, which the loop's end would close as a connection


def count(case: str, calls: int) -> float:
    """Instructions per call of ``case``."""
    return instructions_per_call(__spec__.name, case, calls, BASE)


def main(argv: list[str]) -> None:
    options = parser("python", __doc__)
    options.add_argument("--calls", type=int, default=5000)
    options.add_argument("--out", help="results/python.md, or python_async.md with --async")
    options.add_argument(
        "--async", dest="aio", action="store_true", help="through Guard.arun on the async stub"
    )
    options.add_argument("--metrics", action="store_true", help="mideng's calls with metrics on")
    options.add_argument(
        "--metrics-counts", action="store_true", help="metrics on, durations=False"
    )
    options.add_argument(
        "--after-disable",
        choices=("same", "new"),
        help="metrics off again after enable(): on the store they instrumented (same), or on "
        "one made after (new)",
    )
    args = options.parse_args(argv)
    need_valgrind("python")
    if args.metrics or args.metrics_counts:
        os.environ["MIDENG_BENCH_METRICS"] = "1" if args.metrics else "counts"
    if args.aio:
        os.environ["MIDENG_BENCH_ASYNC"] = "1"
    if args.after_disable:
        os.environ["MIDENG_BENCH_AFTER_DISABLE"] = args.after_disable
    out = args.out or RESULTS / ("python_async.md" if args.aio else "python.md")
    got = {case: count(case, args.calls) for case in CASES}
    rows = []
    for kind in ("duplicate", "first"):
        floor, ours = got[f"floor {kind}"], got[f"mideng {kind}"]
        rows.append(
            f"| {kind} | {floor / 1000:.1f} | {ours / 1000:.1f} | {(ours - floor) / 1000:.1f} |"
        )
    text = "\n".join(
        [
            "# Python per guarded call (instructions, driver stubbed)",
            "",
            f"Command: `{command('python', argv)}`",
            "",
            f"Python {platform.python_version()}, {platform.machine()}, valgrind callgrind; "
            f"thousands of instructions per call over {args.calls} calls, PostgreSQL statements"
            + (
                ", awaited (`Guard.arun`, the async executor, an async stub cursor)."
                if args.aio
                else "."
            ),
            "",
            "| call | raw floor's Python | mideng (Guard + SQLStore) | mideng adds |",
            "|---|---:|---:|---:|",
            *rows,
            "",
            "The floor is the raw scheme's own Python on the same stubbed cursor (duplicate: "
            "execute, fetchone, json.loads; first call: two executes and json.dumps), so the last "
            "column is what mideng costs in Python on top of any driver. A real call adds the "
            "driver's own Python and the round trip, the same for both (the sql case).",
        ]
    )
    print(text)
    write(out, text)


if __name__ == "__main__":  # the child instructions_per_call counts
    child(*child_call(sys.argv[1:]))
