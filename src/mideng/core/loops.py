"""Moved to ``mideng.core.event_loop``; kept for one release, its names answering with a
DeprecationWarning, while mideng.stores and mideng.messaging still import them here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mideng.core import event_loop
from mideng.moved import moved

if TYPE_CHECKING:  # what the names are, for type checkers; at run time __getattr__ answers
    from mideng.core.event_loop import running_loop, to_thread

__all__ = ["running_loop", "to_thread"]
_HOMES = dict.fromkeys(__all__, event_loop)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
