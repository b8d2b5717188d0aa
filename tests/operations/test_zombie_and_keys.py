"""A SIGSTOPped holder resumed after a take-over cannot record a step; a step killed after
its remote call is re-sent with the same downstream key, and the provider charges once."""

from __future__ import annotations

import collections
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mideng.errors import InProgressError
from mideng.stores.steps import StepStore
from tests.backends import Ctx, Opened
from tests.operations.payment import Provider, build, effects
from tests.operations.processes import LEASE, open_backend, start, until

pytestmark = pytest.mark.slow


@pytest.fixture(params=["postgresql", "sqlite", "redis"])
def crash_store(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Opened]:
    yield from open_backend(request.param, ctx)


def test_sigstopped_zombie_cannot_record_a_step(crash_store: Opened, tmp_path: Path) -> None:
    assert crash_store.url is not None
    zombie = start(crash_store, tmp_path, "pay", ["order-z"], MIDENG_PAUSE_AFTER="1")
    try:
        until(lambda: (tmp_path / "paused-1").exists() or zombie.poll() is not None)
        assert zombie.poll() is None
        os.kill(zombie.pid, signal.SIGSTOP)
        holding, release = threading.Event(), threading.Event()

        def coupon_waits() -> None:  # the successor holds the live claim while the zombie runs
            holding.set()
            assert release.wait(30)

        guard, pay, _ = build(
            crash_store.url,
            crash_store.options,
            tmp_path,
            LEASE,
            hooks={"issue_coupon": coupon_waits},
        )
        results: list[dict[str, str]] = []

        def successor() -> None:
            while True:
                try:
                    results.append(pay("order-z"))
                    return
                except InProgressError:
                    threading.Event().wait(0.05)

        taker = threading.Thread(target=successor)
        taker.start()
        assert holding.wait(30), "the successor never took over"
        (tmp_path / "go").write_text("go")
        os.kill(zombie.pid, signal.SIGCONT)
        assert zombie.wait(30) == 3, "the zombie's step was recorded"
        # The zombie's issue_coupon ran and its record was refused: it stopped there, and the
        # only step kept is the one it recorded while it still held the claim.
        assert "add_points:order-z" not in effects(tmp_path)
        store = guard.store
        assert isinstance(store, StepStore)
        (kept,) = store.operations("pay_notify")
        assert kept.steps == ["mark_paid#1"]
        release.set()
        taker.join(30)
        assert len(results) == 1
        done = results[0]
        # The zombie's mark_paid was recorded before it stopped, and replayed to the successor;
        # its issue_coupon ran (that is what a zombie does) but was refused by the store.
        assert done["paid"].endswith(f":{zombie.pid}")
        assert all(done[f].endswith(f":{os.getpid()}") for f in ("coupon", "points", "sms"))
        assert pay("order-z") == done
        assert collections.Counter(effects(tmp_path))["mark_paid:order-z"] == 1
        record = guard.get("pay_notify", "order-z")
        assert record is not None
        assert record.fence == 2
        guard.close()
    finally:
        if zombie.poll() is None:
            os.kill(zombie.pid, signal.SIGCONT)
            zombie.kill()
            zombie.wait(10)


def test_step_killed_after_its_remote_call_resends_the_same_key(
    crash_store: Opened, tmp_path: Path
) -> None:
    assert crash_store.url is not None
    child = start(crash_store, tmp_path, "checkout", ["order-c"], MIDENG_DIE_AFTER="9")
    assert child.wait(60) == -signal.SIGKILL
    provider = Provider(tmp_path / "provider.db")
    assert provider.count("calls") == 1
    guard, _, checkout = build(crash_store.url, crash_store.options, tmp_path, LEASE)
    try:
        until(lambda: [p.state for p in guard.pending("checkout")] == ["expired"])
        (report,) = guard.reconcile("checkout", min_age=0)
        assert report.outcome == "finished"
        keys = provider.keys()
        assert len(keys) == 2
        assert keys[0] == keys[1]  # the same downstream key, so the provider deduped it
        assert provider.count("charges") == 1
        assert checkout("order-c", 1250) == f"ch_{keys[0][-8:]}"
        assert provider.count("calls") == 2
    finally:
        guard.close()
