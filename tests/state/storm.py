"""One storming process: T threads, each running every phase on the same rows.

Phases, each started together across all processes (a process barrier, then a thread barrier):
``advance`` moves every order PAID -> SHIPPED, in a shuffled order per thread; ``decrement``
takes one unit of the one stock, ``attempts`` times per thread; ``insert`` inserts every
business key once per thread, each inside the caller's own transaction followed by the
caller's next statement (an audit row) and a commit. Every answer goes back to the parent,
which checks the totals.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, text

from bench.business import business_tables
from mideng.state import StateMachine, decrement, insert_once

FLOW = StateMachine({"NEW": ["PAID"], "PAID": ["SHIPPED"], "SHIPPED": ["DONE"]}, initial="NEW")


def tables(suffix: str) -> dict[str, Table]:
    metadata = MetaData()
    made = business_tables(metadata, suffix)
    made["audit"] = Table(
        f"audit_{suffix}",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("order_no", String(40), nullable=False),
        Column("worker", String(40), nullable=False),
    )
    return made


def storm(
    url: str,
    suffix: str,
    orders: list[str],
    keys: list[str],
    sku: str,
    attempts: int,
    threads: int,
    barrier: Any,
    out: Any,
    worker: int,
) -> None:
    made = tables(suffix)
    # SQLite has one writer at a time: give a waiting one the storm's length, not 5 s.
    wait = {"timeout": 120} if url.startswith("sqlite") else {}
    engine = create_engine(
        url, pool_size=threads, max_overflow=0, pool_timeout=120, connect_args=wait
    )
    found: dict[str, list[Any]] = {"advance": [], "decrement": [], "insert": [], "errors": []}
    lock = threading.Lock()

    def advance(me: str, rng: random.Random) -> list[Any]:
        seen = []
        order = list(orders)
        rng.shuffle(order)
        with engine.connect() as conn:
            for no in order:
                got = FLOW.advance(conn, made["orders"], {"order_no": no}, "SHIPPED")
                seen.append((no, type(got).__name__))
        return seen

    def take(me: str, rng: random.Random) -> list[Any]:
        seen = []
        with engine.connect() as conn:
            for i in range(attempts):
                inside = (i + int(me.rsplit("-", 1)[1])) % 2 == 0
                if inside:
                    conn.begin()
                got = decrement(conn, made["stock"], {"sku": sku}, "qty", 1)
                if inside:
                    conn.commit()
                seen.append((type(got).__name__, getattr(got, "current", None)))
        return seen

    def insert(me: str, rng: random.Random) -> list[Any]:
        seen = []
        order = list(keys)
        rng.shuffle(order)
        audit = made["audit"]
        with engine.connect() as conn:
            for key in order:
                conn.begin()
                got = insert_once(
                    conn, made["orders"], {"order_no": key, "amount": 1}, unique="order_no"
                )
                # The caller's next statement, in the same transaction, must just work.
                conn.execute(audit.insert().values(order_no=key, worker=me))
                conn.commit()
                seen.append((key, type(got).__name__, got.row["id"]))
        return seen

    phases: list[tuple[str, Callable[[str, random.Random], list[Any]]]] = [
        ("advance", advance),
        ("decrement", take),
        ("insert", insert),
    ]
    for name, phase in phases:
        barrier.wait()
        start = threading.Barrier(threads)

        def run(
            me: str,
            phase: Callable[[str, random.Random], list[Any]] = phase,
            name: str = name,
            start: threading.Barrier = start,
        ) -> None:
            rng = random.Random(me)
            start.wait()
            try:
                seen = phase(me, rng)
            except Exception as exc:  # the parent reports it
                with lock:
                    found["errors"].append(f"{me}: {type(exc).__name__}: {exc}")
                return
            with lock:
                found[name].extend(seen)

        pool = [threading.Thread(target=run, args=(f"{worker}-{i}",)) for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))
    engine.dispose()
    out.put(found)
