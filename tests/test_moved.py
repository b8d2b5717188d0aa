"""Modules that moved keep their old import paths for one release: each old name answers with
the object it names now, and a DeprecationWarning naming where to import it from
(``mideng.moved``). Multi-step operations' paths from before they were one package are here
too; the brokers' and the stores' are listed beside their tests (test_old_paths.py in
tests/messaging and tests/stores)."""

from __future__ import annotations

import importlib

import pytest

import mideng.guard.heartbeat
import mideng.operations
from mideng.core import callables, event_loop
from mideng.db import caller_connection
from mideng.guard import cancellation, owner_ids
from mideng.guard.heartbeat import schedule, tasks
from mideng.observability import observers, store_metrics
from mideng.operations import methods, pending, reconcile, stale, steps
from tests.messaging.test_old_paths import MOVED as MESSAGING
from tests.stores.test_old_paths import MOVED as STORES

MOVED = [
    ("mideng.db.site", "Site", caller_connection.Site),
    ("mideng.db.site", "AsyncSite", caller_connection.AsyncSite),
    ("mideng.db.site", "execute_for", caller_connection.execute_for),
    ("mideng.guard.lease", "stats", mideng.guard.heartbeat.stats),
    ("mideng.guard.lease", "STATS", schedule.STATS),
    ("mideng.guard.lease", "Lease", schedule.Lease),
    ("mideng.guard.aheartbeat", "hold_async", tasks.hold_async),
    ("mideng.guard.aheartbeat", "AsyncBeat", tasks.AsyncBeat),
    ("mideng.guard.owners", "OWNERS", owner_ids.OWNERS),
    ("mideng.guard.cancelled", "through", cancellation.through),
    ("mideng.guard.bodies", "return_hint", callables.return_hint),
    ("mideng.core.calls", "is_async", callables.is_async),
    ("mideng.core.loops", "running_loop", event_loop.running_loop),
    ("mideng.core.loops", "to_thread", event_loop.to_thread),
    ("mideng.observability.watch", "store_label", observers.store_label),
    ("mideng.observability.instrument", "counted", store_metrics.counted),
    ("mideng.observability.instrument", "uncounted", store_metrics.uncounted),
    ("mideng.effects", "step_key", mideng.operations.step_key),
    ("mideng.effects", "step_id", mideng.operations.step_id),
    ("mideng.effects", "reconcile_forever", mideng.operations.reconcile_forever),
    ("mideng.effects", "areconcile_forever", mideng.operations.areconcile_forever),
    ("mideng.effects", "PendingOperation", mideng.operations.PendingOperation),
    ("mideng.effects", "Reconciled", mideng.operations.Reconciled),
    ("mideng.effects", "StaleTask", mideng.operations.StaleTask),
    ("mideng.guard.operations", "Operations", methods.Operations),
    ("mideng.guard.steps", "current_step", steps.current_step),
    ("mideng.guard.steps", "Running", steps.Running),
    ("mideng.guard.recovery", "Reconciled", mideng.operations.Reconciled),
    ("mideng.guard.recovery", "StaleTask", mideng.operations.StaleTask),
    ("mideng.guard.recovery", "reconcile", reconcile.reconcile),
    ("mideng.guard.recovery", "pending", pending.pending),
    ("mideng.guard.recovery", "stale", stale.stale),
]


@pytest.mark.parametrize(("old", "name", "now"), MOVED + MESSAGING + STORES)
def test_an_old_path_answers_and_warns(old: str, name: str, now: object) -> None:
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} is deprecated") as caught:
        assert getattr(module, name) is now
    assert caught[0].filename == __file__  # the warning points at the code that asked


def test_a_switch_read_through_its_old_path_is_the_current_one() -> None:
    """``watch.metrics`` is read when asked, not copied when the old module was made."""
    watch = importlib.import_module("mideng.observability.watch")
    with pytest.warns(DeprecationWarning, match="import metrics from mideng.observability"):
        assert watch.metrics is observers.metrics


def test_from_import_warns_at_the_importing_line() -> None:
    with pytest.warns(DeprecationWarning, match="import Site from mideng.db.caller_connection"):
        from mideng.db.site import Site
    assert Site is caller_connection.Site
    with pytest.warns(DeprecationWarning, match="import step_key from mideng.operations"):
        from mideng.effects import step_key
    assert step_key is mideng.operations.step_key


def test_a_name_the_old_module_never_had_is_an_attribute_error() -> None:
    module = importlib.import_module("mideng.guard.lease")
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        getattr(module, "nothing")  # noqa: B009
