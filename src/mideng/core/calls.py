"""Moved to ``mideng.core.callables``; kept for one release, its names answering with a
DeprecationWarning, while mideng.messaging still imports them here."""

from __future__ import annotations

from typing import Any

from mideng.core import callables
from mideng.moved import moved

_HOMES = {"is_async": callables}


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
