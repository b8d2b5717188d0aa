"""mideng.state primitives against the same SQL by hand, timed on SQLite, PostgreSQL, MariaDB.

    .venv/bin/python -m bench state [--rounds 60] [--calls 20] [--warm 100]

Each primitive is timed on its happy path (the one conditional statement) and on a duplicate
(the statement that changes nothing, then the read that tells why), against the same SQL sent
by hand on the same SQLAlchemy connection: once as a ``text()`` statement, once as the Core
construct a user would write. "caller" runs inside an open transaction (the statement and the
Python around it); "autocommit" gives each call its own transaction (BEGIN, statement, COMMIT;
the hand-written calls do ``with conn.begin():``). insert_once's duplicate WARNING is
silenced (the logger's level), since the hand-written code logs nothing. Every number is the
median of per-call wall times (µs); contenders take turns in batches of ``--calls``, in a new
order every round.
"""

from __future__ import annotations

import argparse
import logging
import platform
import random
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy
from sqlalchemy import bindparam, create_engine, insert, select, text, update
from sqlalchemy.exc import IntegrityError

from bench.business import tables
from bench.report import RESULTS, command, parser, write
from bench.services import MYSQL_URL, POSTGRES_URL, reachable
from mideng.state import StateMachine, decrement, insert_once, update_versioned

FLOW = StateMachine({"NEW": ["PAID"], "PAID": ["SHIPPED"], "SHIPPED": ["DONE"]})
Call = Callable[[int], object]


@dataclass
class Row:
    """One primitive on one path: mideng, and the same statement by hand two ways."""

    name: str
    calls: dict[str, Call]
    times: dict[str, list[float]] = field(default_factory=dict)


def statements(kind: str, t: Any) -> dict[str, Any]:
    """The hand-written statements: the SQL mideng sends, as a user would type it."""
    o, s = t["orders"].name, t["stock"].name
    cols = "id, order_no, status, amount, version, note"
    if kind == "mysql":
        ins = f"INSERT INTO {o} (order_no, amount) VALUES (:o, :a) RETURNING {cols}"
        lock = " LOCK IN SHARE MODE"
    else:
        ins = (
            f"INSERT INTO {o} (order_no, amount) VALUES (:o, :a) "
            f"ON CONFLICT (order_no) DO NOTHING RETURNING {cols}"
        )
        lock = ""
    return {
        "advance": text(f"UPDATE {o} SET status = :to WHERE order_no = :w AND status IN (:s)"),
        "status": text(f"SELECT status FROM {o} WHERE order_no = :w{lock}"),
        "decrement": text(f"UPDATE {s} SET qty = qty - :n WHERE sku = :w AND qty >= :n"),
        "versioned": text(
            f"UPDATE {o} SET amount = :a, version = version + 1 WHERE order_no = :w "
            "AND version = :v"
        ),
        "insert": text(ins),
        "row": text(f"SELECT {cols} FROM {o} WHERE order_no = :o{lock}"),
    }


def constructs(kind: str, t: Any) -> dict[str, Any]:
    """The same statements as Core constructs."""
    orders, stock = t["orders"], t["stock"]
    from sqlalchemy.dialects import postgresql, sqlite

    ins: Any = insert(orders)
    if kind != "mysql":
        dialect_insert: Any = postgresql.insert if kind == "postgresql" else sqlite.insert
        ins = dialect_insert(orders).on_conflict_do_nothing(index_elements=[orders.c.order_no])
    row = select(*orders.c).where(orders.c.order_no == bindparam("o"))
    status = select(orders.c.status).where(orders.c.order_no == bindparam("w"))
    if kind == "mysql":
        row, status = row.with_for_update(read=True), status.with_for_update(read=True)
    return {
        "advance": update(orders)
        .where(orders.c.order_no == bindparam("w"), orders.c.status.in_([bindparam("s")]))
        .values(status=bindparam("to")),
        "status": status,
        "decrement": update(stock)
        .where(stock.c.sku == bindparam("w"), stock.c.qty >= bindparam("n"))
        .values(qty=stock.c.qty - bindparam("n")),
        "versioned": update(orders)
        .where(orders.c.order_no == bindparam("w"), orders.c.version == bindparam("v"))
        .values(amount=bindparam("a"), version=orders.c.version + 1),
        "insert": ins.values(order_no=bindparam("o"), amount=bindparam("a")).returning(*orders.c),
        "row": row,
    }


def hand(conn: Any, kind: str, sql: dict[str, Any], tag: str, own: bool) -> dict[str, Call]:
    """Each path by hand, deciding what mideng decides (rowcount, the row read back); ``own``:
    in its own transaction, as autocommit use of a primitive is."""

    def advance(key: str) -> object:
        if conn.execute(sql["advance"], {"to": "SHIPPED", "w": key, "s": "PAID"}).rowcount:
            return "applied"
        return conn.execute(sql["status"], {"w": key}).scalar_one_or_none()

    def inserted(key: str) -> object:
        try:
            row = conn.execute(sql["insert"], {"o": key, "a": 1}).first()
        except IntegrityError as exc:
            if kind != "mysql" or exc.orig.args[0] != 1062:  # type: ignore[union-attr]
                raise
            row = None
        if row is not None:
            return row._mapping
        return conn.execute(sql["row"], {"o": key}).first()._mapping

    def take() -> object:
        return conn.execute(sql["decrement"], {"n": 1, "w": "sku-big"}).rowcount

    def versioned(key: str) -> object:
        return conn.execute(sql["versioned"], {"a": 2, "w": key, "v": 0}).rowcount

    calls: dict[str, Call] = {
        "advance": lambda i: advance(f"adv-{tag}-{i}"),
        "advance, duplicate": lambda i: advance("dup-adv"),
        "decrement": lambda i: take(),
        "update_versioned": lambda i: versioned(f"ver-{tag}-{i}"),
        "insert_once": lambda i: inserted(f"new-{tag}-{i}"),
        "insert_once, duplicate": lambda i: inserted("dup-ins"),
    }
    if not own:
        return calls

    def owning(call: Call) -> Call:
        def run(i: int) -> object:
            with conn.begin():
                return call(i)

        return run

    return {name: owning(call) for name, call in calls.items()}


def ours(conn: Any, t: Any, tag: str) -> dict[str, Call]:
    orders, stock = t["orders"], t["stock"]
    by_no = "order_no"
    return {
        "advance": lambda i: FLOW.advance(conn, orders, {by_no: f"adv-{tag}-{i}"}, "SHIPPED"),
        "advance, duplicate": lambda i: FLOW.advance(conn, orders, {by_no: "dup-adv"}, "SHIPPED"),
        "decrement": lambda i: decrement(conn, stock, {"sku": "sku-big"}, "qty", 1),
        "update_versioned": lambda i: update_versioned(
            conn, orders, {by_no: f"ver-{tag}-{i}"}, {"amount": 2}, version=0
        ),
        "insert_once": lambda i: insert_once(
            conn, orders, {by_no: f"new-{tag}-{i}", "amount": 1}, unique=by_no
        ),
        "insert_once, duplicate": lambda i: insert_once(
            conn, orders, {by_no: "dup-ins", "amount": 1}, unique=by_no
        ),
    }


CONTENDERS = ("mideng", "text()", "Core")


def seed(engine: Any, t: Any, tags: list[str], per_tag: int) -> None:
    orders = t["orders"]
    rows = [
        {"order_no": f"{what}-{tag}-{i}", "status": "PAID", "amount": 1}
        for tag in tags
        for what in ("adv", "ver")
        for i in range(per_tag)
    ]
    rows += [
        {"order_no": "dup-adv", "status": "SHIPPED", "amount": 1},
        {"order_no": "dup-ins", "status": "NEW", "amount": 1},
    ]
    with engine.begin() as conn:
        for start in range(0, len(rows), 2000):
            conn.execute(orders.insert(), rows[start : start + 2000])
        conn.execute(t["stock"].insert().values(sku="sku-big", qty=10**9))


def bench_database(label: str, url: str, args: argparse.Namespace) -> list[str]:
    t = tables(uuid.uuid4().hex[:10])
    metadata = t["orders"].metadata
    engine = create_engine(url)
    metadata.create_all(engine)
    per_tag = args.warm + args.rounds * args.calls
    modes = ("caller", "autocommit")
    seed(engine, t, [f"{c}{m}" for c in range(len(CONTENDERS)) for m in modes], per_tag)
    try:
        with engine.connect() as conn:
            kind = "mysql" if conn.dialect.name in ("mysql", "mariadb") else conn.dialect.name
            version = ".".join(map(str, conn.dialect.server_version_info or ()))
            conn.rollback()
            lines = [f"### {label} {version}", ""]
            for mode in modes:
                rows = _rows(conn, kind, t, mode)
                _measure(conn, rows, mode, args)
                lines += _table(mode, rows)
    finally:
        metadata.drop_all(engine)
        engine.dispose()
    return lines


def _rows(conn: Any, kind: str, t: Any, mode: str) -> list[Row]:
    own = mode == "autocommit"
    by = {
        "mideng": ours(conn, t, f"0{mode}"),
        "text()": hand(conn, kind, statements(kind, t), f"1{mode}", own),
        "Core": hand(conn, kind, constructs(kind, t), f"2{mode}", own),
    }
    return [
        Row(name, {c: by[c][name] for c in CONTENDERS}, {c: [] for c in CONTENDERS})
        for name in by["mideng"]
    ]


def _measure(conn: Any, rows: list[Row], mode: str, args: argparse.Namespace) -> None:
    clock = time.perf_counter_ns
    inside = mode == "caller"
    counter = dict.fromkeys(((r.name, c) for r in rows for c in CONTENDERS), 0)

    def batch(row: Row, contender: str, n: int, keep: bool) -> None:
        call = row.calls[contender]
        at = counter[(row.name, contender)]
        if inside:
            conn.begin()
        for i in range(at, at + n):
            start = clock()
            call(i)
            if keep:
                row.times[contender].append((clock() - start) / 1000)
        if inside:
            conn.commit()
        counter[(row.name, contender)] = at + n

    for row in rows:
        for contender in CONTENDERS:
            batch(row, contender, args.warm, keep=False)
    for r in range(args.rounds):
        for row in random.Random(r).sample(rows, len(rows)):
            for contender in random.Random(r * 7 + 1).sample(CONTENDERS, len(CONTENDERS)):
                batch(row, contender, args.calls, keep=True)


def _table(mode: str, rows: list[Row]) -> list[str]:
    lines = [
        f"#### {mode}",
        "",
        "| primitive | mideng µs | text() µs | x text() | Core µs | x Core |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        m, tx, core = (statistics.median(row.times[c]) for c in CONTENDERS)
        lines.append(
            f"| {row.name} | {m:.1f} | {tx:.1f} | {m / tx:.2f} | {core:.1f} | {m / core:.2f} |"
        )
    return [*lines, ""]


def main(argv: list[str]) -> None:
    # A duplicate's WARNING line is part of insert_once; here it would be the cost of whatever
    # handler prints it, which the hand-written contenders do not have.
    logging.getLogger("mideng").setLevel(logging.ERROR)
    options = parser("state", __doc__)
    options.add_argument("--rounds", type=int, default=60)
    options.add_argument("--calls", type=int, default=20)
    options.add_argument("--warm", type=int, default=100)
    args = options.parse_args(argv)
    out = [
        "# Business-table primitives benchmark",
        "",
        f"Command: `{command('state', argv)}`",
        "",
        f"Python {platform.python_version()}, SQLAlchemy {sqlalchemy.__version__}, "
        f"{platform.machine()}, servers on the same host (loopback); {args.rounds} batches of "
        f"{args.calls} calls per contender, interleaved; medians, µs per call.",
        "",
    ]
    sqlite_file = Path(f"/tmp/mideng-bench-state-{uuid.uuid4().hex}.db")
    databases: list[tuple[str, str, str | None]] = [("SQLite", f"sqlite:///{sqlite_file}", None)]
    databases += [("PostgreSQL", POSTGRES_URL, "postgresql"), ("MariaDB", MYSQL_URL, "mysql")]
    for label, url, service in databases:
        if service is not None and not reachable(service):
            out += [f"### {label}", "", "not reachable, skipped", ""]
            continue
        out += bench_database(label, url, args)
        print(f"{label} done", flush=True)
    sqlite_file.unlink(missing_ok=True)
    text_out = "\n".join(out)
    write(RESULTS / "state.md", text_out)
    print(text_out)
