"""Many callers at once on one unfinished operation: retries and reconcilers in threads and
in other processes. Every step's effect happens once and everyone gets the same result."""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mideng.errors import InProgressError
from tests.backends import Ctx, Opened
from tests.operations.payment import STEPS, build, effects
from tests.operations.processes import LEASE, open_backend, start, until

pytestmark = pytest.mark.slow


@pytest.fixture(params=["postgresql", "sqlite", "redis"])
def race_store(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Opened]:
    yield from open_backend(request.param, ctx)


def test_retries_and_reconcilers_at_once_run_each_step_once(
    race_store: Opened, tmp_path: Path
) -> None:
    assert race_store.url is not None
    orders = [f"order-{i}" for i in range(4)]
    guard, pay, _ = build(race_store.url, race_store.options, tmp_path, LEASE, step_time=0.01)
    results: dict[str, list[object]] = collections.defaultdict(list)
    lock = threading.Lock()
    go = threading.Barrier(8)

    def caller(n: int) -> None:
        if go.wait() == 0:
            (tmp_path / "race-go").write_text("go")
        for order in orders[n % 2 :] + orders[: n % 2]:
            while True:
                try:
                    done = pay(order)
                except InProgressError:
                    threading.Event().wait(0.01)
                    continue
                with lock:
                    results[order].append(done)
                break
        if n % 4 == 0:
            guard.reconcile("pay_notify", min_age=0)

    # Two other processes pay the same orders while the threads do.
    env = {"MIDENG_WAIT_GO": "1", "MIDENG_STEP_TIME": "0.01"}
    others = [start(race_store, tmp_path, "pay", orders[::-1], **env) for _ in range(2)]
    until(lambda: len(list(tmp_path.glob("ready-*"))) == 2)
    threads = [threading.Thread(target=caller, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for other in others:
        assert other.wait(60) == 0
    try:
        assert collections.Counter(effects(tmp_path)) == {
            f"{s}:{o}": 1 for o in orders for s in STEPS
        }
        for order in orders:
            assert len(results[order]) == 8
            assert all(r == results[order][0] for r in results[order])
            assert pay(order) == results[order][0]
        assert guard.pending() == []
    finally:
        guard.close()
