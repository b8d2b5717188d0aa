"""How ``v0.1.0-<kind>.json`` was made: mideng 0.1.0's public API writing rows into the tables
it created itself, before schema versions existed. Run with that release's code on the path
(``python tests/schema/data/capture.py postgresql+psycopg://… mysql+pymysql://… ``); the
upgrade tests load the rows it wrote into tables made from ``v0.1.0-<kind>.sql``.

Kept for the record: a later mideng writes versioned tables, so running it again with one
captures something else.

What the rows hold, per database:

- a finished call: scope ``pay``, key ``o-1``, result ``{"order": "o-1", "paid": 100}``;
- an operation that died in its second step: scope ``ship``, key ``o-2``, step ``pack#1``
  recorded (``packed o-2``), ``send#1`` never finished, the holder's lease long gone;
- two outbox messages never relayed: one keyed ``o-3`` and one without a key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

HERE = Path(__file__).parent
RECORDS, OUTBOX = "v010_records", "v010_outbox"
# The rows' table roles, each with the name it has while capturing.
ROLES = {
    "records": RECORDS,
    "steps": f"{RECORDS}_steps",
    "outbox": OUTBOX,
    "outbox_keys": f"{OUTBOX}_keys",
}


def write(url: str) -> None:
    """Run in a child process: the finished call, then the operation that dies mid-way."""
    from mideng import Guard, open_store
    from mideng.outbox import Outbox

    guard = Guard(open_store(plain(url), table=RECORDS), lease=1.0, ttl=None)

    @guard.idempotent("pay", key="{order}")
    def pay(order: str) -> dict[str, Any]:
        return {"order": order, "paid": 100}

    @guard.step("pack")
    def pack(order: str) -> str:
        return f"packed {order}"

    @guard.step("send")
    def send(order: str) -> str:
        os._exit(3)  # the process dies here: the operation stays unfinished

    @guard.operation("ship", key="{order}", steps=("pack", "send"))
    def ship(order: str) -> str:
        pack(order)
        return send(order)

    pay("o-1")
    engine = create_engine(url)
    outbox = Outbox(engine, table=OUTBOX)
    outbox.create_schema()
    with engine.begin() as conn:
        outbox.add(conn, "orders", {"order": "o-3"}, key="o-3")
        outbox.add(conn, "audit", {"what": "unkeyed"})
    engine.dispose()
    ship("o-2")


def plain(url: str) -> str:
    """The store's own URL form (it takes no SQLAlchemy driver name)."""
    return url.replace("+psycopg", "").replace("+pymysql", "")


def _value(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"hex": bytes(value).hex()}
    return value


def dump(url: str, kind: str) -> None:
    engine = create_engine(url)
    rows: dict[str, list[dict[str, Any]]] = {}
    with engine.connect() as conn:
        for role, table in ROLES.items():
            found = conn.execute(text(f"SELECT * FROM {table}")).mappings()
            rows[role] = [{name: _value(v) for name, v in row.items()} for row in found]
    with engine.begin() as conn:
        for table in ROLES.values():
            conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
        if kind == "postgresql":
            conn.execute(text(f"DROP FUNCTION IF EXISTS {OUTBOX}_notify()"))
    engine.dispose()
    (HERE / f"v0.1.0-{kind}.json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")


def capture(url: str, kind: str) -> None:
    child = subprocess.run([sys.executable, __file__, "--write", url], check=False)
    assert child.returncode == 3, child.returncode  # died in the operation's second step
    dump(url, kind)


if __name__ == "__main__":
    if sys.argv[1] == "--write":
        write(sys.argv[2])
    else:
        postgresql, mysql = sys.argv[1:3]
        with tempfile.TemporaryDirectory() as tmp:
            capture(f"sqlite:///{tmp}/records.db", "sqlite")
        capture(postgresql, "postgresql")
        capture(mysql, "mysql")
