"""The recipe of docs/state.md: guard.transaction around decrement, so a retried order takes
its stock once — also when the process running it is killed (SIGKILL) between two attempts,
before its transaction committed or after. On PostgreSQL, MariaDB and SQLite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, text

from mideng import Guard, open_store
from mideng.core.record import Status
from tests.services import MYSQL_URL, POSTGRES_URL, need
from tests.state.recipe import OutOfStock, take_stock
from tests.state.storm import tables

pytestmark = pytest.mark.slow

RECIPE = Path(__file__).with_name("recipe.py")


@pytest.fixture(params=["postgresql", "mysql", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'recipe.db'}"
        return
    need(str(request.param))
    yield POSTGRES_URL if request.param == "postgresql" else MYSQL_URL


def _killed_at(
    workdir: Path, url: str, record: str, suffix: str, order_no: str, sku: str, point: str
) -> None:
    """Run the recipe in a process, SIGKILL it when it reaches ``point``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    args = [url, record, suffix, order_no, sku, point, str(workdir)]
    proc = subprocess.Popen([sys.executable, str(RECIPE), *args], env=env)
    try:
        end = time.monotonic() + 60
        while not (workdir / point).exists():
            assert proc.poll() is None, "the recipe process died before reaching its point"
            assert time.monotonic() < end, "the recipe process never reached its point"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.parametrize("point", ["decremented", "committed"])
def test_a_retry_after_a_kill_takes_the_stock_once(url: str, point: str, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:10]
    made = tables(suffix)
    stock = made["stock"]
    record = f"mideng_recipe_{suffix}"
    engine = create_engine(url)
    stock.create(engine)
    store = open_store(url, table=record)
    guard = Guard(store, lease=30)
    sku, order_no = f"sku-{suffix}", f"order-{suffix}"
    with engine.begin() as conn:
        conn.execute(stock.insert().values(sku=sku, qty=5))

    def left() -> int:
        with engine.connect() as conn:
            return int(conn.execute(select(stock.c.qty)).scalar_one())

    try:
        _killed_at(tmp_path, url, record, suffix, order_no, sku, point)
        # Killed before its commit: nothing of that attempt stayed. After it: all of it did.
        assert left() == (5 if point == "decremented" else 4)
        with engine.connect() as conn:
            first = take_stock(guard, conn, stock, order_no, sku, 1)
        with engine.connect() as conn:
            again = take_stock(guard, conn, stock, order_no, sku, 1)
        assert first == again == {"order": order_no, "sku": sku, "taken": 1}
        assert left() == 4
        stored = guard.get("stock-take", order_no)
        assert stored is not None
        assert stored.status is Status.SUCCEEDED
        # Another order is another take; an order the stock can't cover takes nothing and
        # leaves no record, so it may be retried once the stock is refilled.
        with engine.connect() as conn:
            take_stock(guard, conn, stock, f"{order_no}-2", sku, 1)
        with engine.connect() as conn, pytest.raises(OutOfStock):
            take_stock(guard, conn, stock, f"{order_no}-3", sku, 9)
        assert left() == 3
        assert guard.get("stock-take", f"{order_no}-3") is None
    finally:
        store.close()
        with engine.begin() as conn:
            conn.execute(text(f"DROP TABLE IF EXISTS {record}"))
        stock.drop(engine)
        engine.dispose()
