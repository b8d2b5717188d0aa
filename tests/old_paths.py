"""What an import path kept for one release must do (mideng._compat.moved): answer a moved
name with the object it names now and a DeprecationWarning that names the new home and points
at the code that asked; answer a name it never had with AttributeError."""

from __future__ import annotations

import importlib

import pytest


def answers_and_warns(old: str, name: str, now: object) -> None:
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} is deprecated") as caught:
        assert getattr(module, name) is now
    assert caught[0].filename == __file__  # the warning points at the code that asked


def never_was(old: str) -> None:
    module = importlib.import_module(old)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        getattr(module, "nothing")  # noqa: B009
