"""mideng.state primitives against the same SQL by hand, counted in instructions per call.

    .venv/bin/python -m bench state-python [--calls 2000] [PRIMITIVE ...]

Wall-clock ratios on a shared VM move with its load (the state case); instruction counts do
not. Each case runs in a child process under ``valgrind --tool=callgrind`` twice, with 1000
and 1000 + ``--calls`` calls, on SQLite in memory inside one open transaction; the difference
divided by ``--calls`` is what one call executes: SQLAlchemy, the sqlite3 module and SQLite's
engine for both, plus mideng's site, loop and primitive for mideng. The "by hand" calls send the
SQL mideng sends as a ``text()`` statement and look at its rowcount or its row (as a mapping:
insert_once's answer), as mideng does; the
"driver SQL" ones send it as SQLite's own text (``?`` binds) through ``exec_driver_sql``, which
skips SQLAlchemy's compiled-cache lookup: the floor for mideng's UPDATEs, which are sent that
way (mideng.state.compiled).
"""

from __future__ import annotations

import platform
import re
import sys
from typing import Any

from bench.callgrind import child_call, instructions_per_call, need_valgrind
from bench.report import RESULTS, parser, write

BASE = 1000
# Rows seeded for every run alike, so the setup cancels out of the difference.
SEED = 6000
PRIMITIVES = ("advance", "decrement", "update_versioned", "insert_once")
CONSTRUCT = {"advance": "advance", "decrement": "decrement", "update_versioned": "versioned"}
CONSTRUCT["insert_once"] = "insert"


def child(case: str, calls: int) -> None:
    from sqlalchemy import create_engine, text

    from bench.business import tables
    from bench.cases.state import constructs
    from mideng.state import StateMachine, decrement, insert_once, update_versioned

    primitive, by = case.rsplit(" ", 1)
    t = tables("py")
    orders, stock = t["orders"], t["stock"]
    engine = create_engine("sqlite://")
    t["orders"].metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            orders.insert(),
            [{"order_no": f"o-{i}", "status": "PAID", "amount": 1} for i in range(SEED)],
        )
        conn.execute(stock.insert().values(sku="s", qty=10**9))
    flow = StateMachine({"NEW": ["PAID"], "PAID": ["SHIPPED"]})
    o = orders.name
    hand: dict[str, Any] = {
        "advance": text(f"UPDATE {o} SET status = :to WHERE order_no = :w AND status IN (:s)"),
        "decrement": text(f"UPDATE {stock.name} SET qty = qty - :n WHERE sku = :w AND qty >= :n"),
        "update_versioned": text(
            f"UPDATE {o} SET amount = :a, version = version + 1 WHERE order_no = :w "
            "AND version = :v"
        ),
        "insert_once": text(
            f"INSERT INTO {o} (order_no, amount) VALUES (:o, :a) ON CONFLICT (order_no) "
            f"DO NOTHING RETURNING id, order_no, status, amount, version, note"
        ),
    }
    # The same texts with SQLite's own binds, in order of appearance.
    driver = {
        name: (re.sub(r":\w+", "?", str(clause)), re.findall(r":(\w+)", str(clause)))
        for name, clause in hand.items()
    }
    conn = engine.connect()
    conn.begin()
    # "core": the Core construct a user would write (the state case's), compiled by SQLAlchemy
    # once and looked up in its compiled cache per call; its RETURNING row typed by the columns.
    sql = constructs("sqlite", t)[CONSTRUCT[primitive]] if by == "core" else hand[primitive]
    for i in range(calls):
        key = f"o-{i}"
        if by == "driver":
            raw, names = driver[primitive]
            given = {"to": "SHIPPED", "w": key, "s": "PAID", "n": 1, "a": 2, "v": 0}
            if primitive == "decrement":
                given["w"] = "s"
            elif primitive == "insert_once":
                given.update(o=f"n-{i}", a=1)
            result = conn.exec_driver_sql(raw, tuple(given[n] for n in names))
            if primitive == "insert_once":
                answered(result)
            else:
                assert result.rowcount
        elif by == "mideng":
            if primitive == "advance":
                flow.advance(conn, orders, {"order_no": key}, "SHIPPED")
            elif primitive == "decrement":
                decrement(conn, stock, {"sku": "s"}, "qty", 1)
            elif primitive == "update_versioned":
                update_versioned(conn, orders, {"order_no": key}, {"amount": 2}, version=0)
            else:
                insert_once(conn, orders, {"order_no": f"n-{i}", "amount": 1}, unique="order_no")
        elif primitive == "advance":
            assert conn.execute(sql, {"to": "SHIPPED", "w": key, "s": "PAID"}).rowcount
        elif primitive == "decrement":
            assert conn.execute(sql, {"n": 1, "w": "s"}).rowcount
        elif primitive == "update_versioned":
            assert conn.execute(sql, {"a": 2, "w": key, "v": 0}).rowcount
        else:
            answered(conn.execute(sql, {"o": f"n-{i}", "a": 1}))
    conn.rollback()


def answered(result: Any) -> object:
    """A hand-written insert's answer: its RETURNING row as a mapping, what insert_once answers
    with (``Inserted.row``) and what the state case's hand-written insert returns."""
    row = result.first()
    assert row is not None
    return row._mapping


def count(case: str, calls: int) -> float:
    """Instructions per call of ``case``."""
    return instructions_per_call(__spec__.name, case, calls, BASE)


def main(argv: list[str]) -> None:
    options = parser("state-python", __doc__)
    options.add_argument("--calls", type=int, default=2000, choices=range(1, SEED - BASE + 1))
    options.add_argument("primitives", nargs="*", help=f"some of {PRIMITIVES} (all by default)")
    args = options.parse_args(argv)
    unknown = set(args.primitives) - set(PRIMITIVES)
    if unknown:
        options.error(f"not primitives: {sorted(unknown)}")
    need_valgrind("state-python")
    rows = []
    for primitive in args.primitives or PRIMITIVES:
        hand, core, raw, ours = (
            count(f"{primitive} {by}", args.calls) for by in ("hand", "core", "driver", "mideng")
        )
        rows.append(
            f"| {primitive} | {hand / 1000:.1f} | {core / 1000:.1f} | {raw / 1000:.1f} | "
            f"{ours / 1000:.1f} | {ours / hand:.2f} | {ours / core:.2f} | "
            f"{(ours - raw) / 1000:.1f} |"
        )
    text = "\n".join(
        [
            "| primitive (happy path) | by hand, text() | by hand, Core | by hand, driver SQL "
            "| mideng | x text() | x Core | mideng adds to driver SQL |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )
    header = (
        f"Python {platform.python_version()}, {platform.machine()}, valgrind callgrind; "
        f"thousands of instructions per call over {args.calls} calls, SQLite in memory, "
        "inside one open transaction."
    )
    print(header + "\n\n" + text)
    write(RESULTS / "state_python.md", header + "\n\n" + text)


if __name__ == "__main__":  # the child instructions_per_call counts
    child(*child_call(sys.argv[1:]))
