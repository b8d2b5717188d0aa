"""Moved to ``mideng.core.event_loop``; kept for one release, its names answering with a
DeprecationWarning, while mideng.stores and mideng.messaging still import them here."""

from __future__ import annotations

from typing import Any

from mideng.core import event_loop
from mideng.moved import moved

_HOMES = dict.fromkeys(("running_loop", "to_thread"), event_loop)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
