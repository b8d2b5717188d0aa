"""Partial success with real kills: a payment process SIGKILLed after each step in turn.

mark paid -> issue coupon -> add points -> send SMS; one process per kill point (after step
1, 2, 3, and after the last step before the operation returns), all at once. Then: pending
lists each, reconcile finishes each after its lease, every effect happened exactly once, and
a later call returns the first result and runs nothing.
"""

from __future__ import annotations

import collections
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from mideng.operations import Reconciled
from tests.backends import Ctx, Opened
from tests.operations.payment import STEPS, build, effects
from tests.operations.processes import LEASE, open_backend, start, until

pytestmark = pytest.mark.slow


@pytest.fixture(params=["postgresql", "sqlite", "redis"])
def crash_store(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Opened]:
    yield from open_backend(request.param, ctx)


def test_killed_after_each_step_is_finished_by_reconcile(
    crash_store: Opened, tmp_path: Path
) -> None:
    assert crash_store.url is not None
    kill_points = {f"order-{n}": n for n in (1, 2, 3, 4)}
    children = [
        start(crash_store, tmp_path, "pay", [order], MIDENG_DIE_AFTER=str(n))
        for order, n in kill_points.items()
    ]
    for child in children:
        assert child.wait(60) == -signal.SIGKILL
    guard, pay, _ = build(crash_store.url, crash_store.options, tmp_path, LEASE)
    try:
        listed = {p.key: p for p in guard.pending("pay_notify")}
        assert set(listed) == set(kill_points)
        for order, n in kill_points.items():
            item = listed[order]
            assert item.steps_done == [f"{s}#1" for s in STEPS[:n]]
            assert item.steps_left == list(STEPS[n:])
            assert item.attempts == 1
            assert item.registered
        # Nothing is run again while the dead holders' leases are live.
        until(lambda: all(p.state == "expired" for p in guard.pending("pay_notify")))
        report = guard.reconcile("pay_notify", min_age=0)
        assert sorted(r.key for r in report if r.outcome == "finished") == sorted(kill_points)
        assert all(isinstance(r, Reconciled) for r in report)
        assert guard.pending() == []
        happened = collections.Counter(effects(tmp_path))
        assert happened == {f"{s}:{o}": 1 for o in kill_points for s in STEPS}
        for order, n in kill_points.items():
            first = pay(order)
            record = guard.get("pay_notify", order)
            assert record is not None
            assert record.fence == 2  # the dead holder's, then reconcile's take-over
            # Steps before the kill ran in the dead process, the rest in this one.
            dead = [first[f] for f in ("paid", "coupon", "points", "sms")][:n]
            assert all(not value.endswith(f":{first['by']}") for value in dead)
            assert pay(order) == first
        assert collections.Counter(effects(tmp_path)) == happened
    finally:
        guard.close()
