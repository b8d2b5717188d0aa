"""Deprecated: the Guard's operation methods are ``mideng.operations.methods``; this module
goes in the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from typing import Any

from mideng._compat import moved
from mideng.operations import methods

_HOMES = {"Operations": methods}


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
