"""insert_once's duplicate on MariaDB against the same statements by hand, counted.

    .venv/bin/python -m bench state-duplicate [--calls 300]

A MariaDB duplicate is the INSERT … RETURNING, its duplicate-key error (1062) and a locking
read of the stored row; most of its client cost is the failing statement's exception path in
the driver and SQLAlchemy. Timed ratios of it move with the machine's load (the state case);
these counts do not. Each case runs in a child process under callgrind with 100 and
100 + ``--calls`` calls inside one open transaction (bench/callgrind.py); the client's
instructions only, the server's work is not counted.
"""

from __future__ import annotations

import logging
import sys
import uuid

from bench.callgrind import child_call, instructions_per_call, need_valgrind
from bench.report import parser
from bench.services import MYSQL_URL

BASE = 100


def child(case: str, calls: int) -> None:
    from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, text
    from sqlalchemy.exc import IntegrityError

    from mideng.state import insert_once

    logging.getLogger("mideng").setLevel(logging.ERROR)  # the WARNING is the handler's cost
    metadata = MetaData()
    table = Table(
        f"dup_bench_{uuid.uuid4().hex[:8]}",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("order_no", String(40), nullable=False, unique=True),
        Column("status", String(20), nullable=False, server_default="NEW"),
        Column("amount", Integer, nullable=False),
    )
    engine = create_engine(MYSQL_URL)
    metadata.create_all(engine)
    cols = "id, order_no, status, amount"
    insert = text(f"INSERT INTO {table.name} (order_no, amount) VALUES (:o, :a) RETURNING {cols}")
    stored = text(f"SELECT {cols} FROM {table.name} WHERE order_no = :o LOCK IN SHARE MODE")
    try:
        with engine.begin() as conn:
            conn.execute(table.insert().values(order_no="dup", amount=1))
        with engine.connect() as conn:
            conn.begin()
            for _ in range(calls):
                if case == "mideng":
                    insert_once(conn, table, {"order_no": "dup", "amount": 1}, unique="order_no")
                    continue
                try:
                    row = conn.execute(insert, {"o": "dup", "a": 1}).first()
                except IntegrityError as exc:
                    if exc.orig.args[0] != 1062:  # type: ignore[union-attr]
                        raise
                    row = None
                if row is None:
                    conn.execute(stored, {"o": "dup"}).one()._mapping  # noqa: B018
            conn.rollback()
    finally:
        metadata.drop_all(engine)
        engine.dispose()


def main(argv: list[str]) -> None:
    options = parser("state-duplicate", __doc__)
    options.add_argument("--calls", type=int, default=300)
    args = options.parse_args(argv)
    need_valgrind("state-duplicate")
    counts = {
        case: instructions_per_call(__spec__.name, case, args.calls, BASE) / 1000
        for case in ("hand", "mideng")
    }
    print(
        f"MariaDB insert_once duplicate, thousands of instructions per call: hand "
        f"{counts['hand']:.1f}, mideng {counts['mideng']:.1f} "
        f"({counts['mideng'] / counts['hand']:.2f}x)"
    )


if __name__ == "__main__":  # the child instructions_per_call counts
    child(*child_call(sys.argv[1:]))
