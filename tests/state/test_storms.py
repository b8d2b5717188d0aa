"""Storms on PostgreSQL, MariaDB and SQLite: 4 processes x 16 threads on the same rows.

- advancing the same 60 orders: exactly one Applied per order, every other call AlreadyThere;
- taking one unit 320 times from a stock of 100: exactly 100 Applied, the stock at 0 and never
  seen below it;
- inserting the same 30 business keys, each in the caller's transaction: one Inserted per key,
  Existing with that row everywhere else, and the caller's next statement always succeeding.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select, text

from tests.services import MYSQL_URL, POSTGRES_URL, need
from tests.state.storm import storm, tables

pytestmark = pytest.mark.slow

PROCESSES, THREADS = 4, 16
# Every row meets all 64 callers: each order and key is raced on however few of them there
# are (fewer rows only make the callers meet on each more often), and 320 takes overrun the
# stock of 100 three times over.
ORDERS, KEYS, STOCK, ATTEMPTS = 60, 30, 100, 5  # 4 x 16 x 5 = 320 attempts


@pytest.fixture(params=["postgresql", "mysql", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'storm.db'}"
        return
    need(str(request.param))
    yield POSTGRES_URL if request.param == "postgresql" else MYSQL_URL


def test_storm(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    suffix = uuid.uuid4().hex[:10]
    made = tables(suffix)
    metadata = made["orders"].metadata
    engine = create_engine(url)
    if url.startswith("sqlite"):
        with engine.connect() as conn:
            conn.execute(text("PRAGMA journal_mode=WAL"))
    metadata.create_all(engine)
    orders = [f"o-{suffix}-{i}" for i in range(ORDERS)]
    keys = [f"k-{suffix}-{i}" for i in range(KEYS)]
    sku = f"sku-{suffix}"
    with engine.begin() as conn:
        conn.execute(
            made["orders"].insert(),
            [{"order_no": no, "status": "PAID", "amount": 1} for no in orders],
        )
        conn.execute(made["stock"].insert().values(sku=sku, qty=STOCK))
    try:
        found = _run(url, suffix, orders, keys, sku, monkeypatch)
        assert found["errors"] == []
        _check_advance(found["advance"], orders)
        _check_decrement(found["decrement"])
        with engine.connect() as conn:
            assert conn.execute(select(made["stock"].c.qty)).scalar_one() == 0
            audited = conn.execute(select(func.count()).select_from(made["audit"])).scalar_one()
            stored = dict(
                conn.execute(
                    select(made["orders"].c.order_no, made["orders"].c.id).where(
                        made["orders"].c.order_no.in_(keys)
                    )
                ).all()
            )
        _check_insert(found["insert"], keys, stored)
        assert audited == PROCESSES * THREADS * KEYS  # every caller's next statement committed
    finally:
        metadata.drop_all(engine)
        engine.dispose()


def _run(
    url: str, suffix: str, orders: list[str], keys: list[str], sku: str, mp: pytest.MonkeyPatch
) -> dict[str, list[Any]]:
    ctx = multiprocessing.get_context("spawn")
    mp.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    barrier, out = ctx.Barrier(PROCESSES), ctx.Queue()
    procs = [
        ctx.Process(
            target=storm,
            args=(url, suffix, orders, keys, sku, ATTEMPTS, THREADS, barrier, out, n),
        )
        for n in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    merged: dict[str, list[Any]] = {"advance": [], "decrement": [], "insert": [], "errors": []}
    for result in results:
        for name, seen in result.items():
            merged[name] += seen
    return merged


def _check_advance(seen: list[tuple[str, str]], orders: list[str]) -> None:
    callers = PROCESSES * THREADS
    assert len(seen) == callers * len(orders)
    per_order = Counter((no, kind) for no, kind in seen)
    for no in orders:
        assert per_order[(no, "Applied")] == 1, no
        assert per_order[(no, "AlreadyThere")] == callers - 1, no


def _check_decrement(seen: list[tuple[str, Any]]) -> None:
    assert len(seen) == PROCESSES * THREADS * ATTEMPTS
    kinds = Counter(kind for kind, _ in seen)
    assert kinds == {"Applied": STOCK, "Insufficient": len(seen) - STOCK}
    # Taking one unit at a time, a refusal can only have seen an empty stock, never less.
    assert {current for kind, current in seen if kind == "Insufficient"} == {0}


def _check_insert(
    seen: list[tuple[str, str, int]], keys: list[str], stored: dict[str, int]
) -> None:
    callers = PROCESSES * THREADS
    assert len(seen) == callers * len(keys)
    assert set(stored) == set(keys)
    per_key = Counter((key, kind) for key, kind, _ in seen)
    for key in keys:
        assert per_key[(key, "Inserted")] == 1, key
        assert per_key[(key, "Existing")] == callers - 1, key
    # Every caller got the one stored row.
    assert all(row_id == stored[key] for key, _, row_id in seen)
