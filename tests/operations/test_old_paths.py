"""The import paths multi-step operations had before ``mideng.operations`` still answer for
one release, each with a DeprecationWarning naming the new one."""

from __future__ import annotations

import pytest

import mideng.operations
from mideng.operations import methods, pending, reconcile, stale, steps
from tests.old_paths import answers_and_warns, never_was

MOVED = [
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


@pytest.mark.parametrize(("old", "name", "now"), MOVED)
def test_an_old_path_answers_and_warns(old: str, name: str, now: object) -> None:
    answers_and_warns(old, name, now)


def test_from_import_warns_at_the_importing_line() -> None:
    with pytest.warns(DeprecationWarning, match="import step_key from mideng.operations"):
        from mideng.effects import step_key
    assert step_key is mideng.operations.step_key


def test_a_name_that_never_was_is_an_attribute_error() -> None:
    never_was("mideng.guard.recovery")
