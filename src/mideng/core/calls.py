"""Moved to ``mideng.core.callables``; kept for one release, its names answering with a
DeprecationWarning, while mideng.messaging still imports them here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mideng.core import callables
from mideng.moved import moved

if TYPE_CHECKING:  # what the names are, for type checkers; at run time __getattr__ answers
    from mideng.core.callables import is_async

__all__ = ["is_async"]
_HOMES = dict.fromkeys(__all__, callables)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
