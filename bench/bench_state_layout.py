"""Instructions per ``advance`` call on two source trees, under several type layouts.

    .venv/bin/python bench/bench_state_layout.py [--shifts 0 7 40] TREE [TREE ...]

TREE is a checkout's root (its ``src`` and ``tests`` are imported), e.g. this one and
``git worktree add /tmp/before <commit>``. A count of one call moves by a thousand or two
instructions with where CPython's type-attribute cache puts each lookup: its slot is chosen by
the type's version tag and the name's address, which shift with whatever the process defined
before. Each case here first defines ``shift`` throw-away classes (each takes a version tag),
then runs bench_state_python.py's advance loop on SQLite in memory inside one open
transaction, with the garbage collector frozen after the setup; callgrind, 2000 calls after
1000 (bench/callgrind.py). Two trees whose calls do the same work count alike under every
shift; a difference that appears under one shift only is the cache's layout, not the code.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from pathlib import Path
from typing import Any

from callgrind import instructions_per_call

BASE, CALLS, SEED = 1000, 2000, 4000


def child(case: str, calls: int) -> None:
    tree, shift = case.rsplit(":", 1)
    for i in range(int(shift)):
        kind: Any = type(f"Shift{i}", (), {"x": i})
        kind.x  # noqa: B018  # a lookup assigns the class its version tag
    sys.path[:0] = [os.path.join(tree, "src"), tree]
    from sqlalchemy import create_engine

    from mideng.state import StateMachine
    from tests.state.storm import tables

    orders = tables("py")["orders"]
    engine = create_engine("sqlite://")
    orders.metadata.create_all(engine)
    with engine.begin() as conn:
        rows = [{"order_no": f"o-{i}", "status": "PAID", "amount": 1} for i in range(SEED)]
        conn.execute(orders.insert(), rows)
    flow = StateMachine({"NEW": ["PAID"], "PAID": ["SHIPPED"]})
    conn = engine.connect()
    conn.begin()
    gc.collect()
    gc.freeze()
    for i in range(calls):
        flow.advance(conn, orders, {"order_no": f"o-{i}"}, "SHIPPED")
    conn.rollback()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--shifts", type=int, nargs="+", default=[0, 7, 40])
    parser.add_argument("--child", nargs=2, metavar=("CASE", "CALLS"), help=argparse.SUPPRESS)
    parser.add_argument("trees", nargs="*", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    if not args.trees:
        parser.error("name at least one tree")
    print("| tree | " + " | ".join(f"shift {s}" for s in args.shifts) + " |")
    print("|---|" + "---:|" * len(args.shifts))
    for tree in args.trees:
        counts = [
            instructions_per_call(__file__, f"{tree.resolve()}:{s}", CALLS, BASE) / 1000
            for s in args.shifts
        ]
        print(f"| {tree} | " + " | ".join(f"{c:.2f}" for c in counts) + " |", flush=True)


if __name__ == "__main__":
    main()
