"""Every old import path of this release answers with the object it names now, and a
DeprecationWarning that names the new path and points at the code that asked (mideng.moved).
Each package's old paths are listed beside its tests."""

from __future__ import annotations

import importlib

import pytest

from tests.messaging.test_old_paths import MOVED as MESSAGING
from tests.operations.test_old_paths import MOVED as OPERATIONS


@pytest.mark.parametrize(("old", "name", "now"), OPERATIONS + MESSAGING)
def test_an_old_path_answers_and_warns(old: str, name: str, now: object) -> None:
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} is deprecated") as caught:
        assert getattr(module, name) is now
    assert caught[0].filename == __file__  # the warning points at the code that asked
