"""Moved to ``mideng.guard.cancellation``; kept for one release, its names answering with a
DeprecationWarning, while mideng.messaging still imports them here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mideng.guard import cancellation
from mideng.moved import moved

if TYPE_CHECKING:  # what the names are, for type checkers; at run time __getattr__ answers
    from mideng.guard.cancellation import give_back, through

__all__ = ["give_back", "through"]
_HOMES = dict.fromkeys(__all__, cancellation)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
