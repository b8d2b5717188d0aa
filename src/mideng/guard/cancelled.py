"""Moved to ``mideng.guard.cancellation``; kept for one release, its names answering with a
DeprecationWarning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mideng.guard import cancellation
from mideng.moved import old_module

if TYPE_CHECKING:  # what the names are, for type checkers; at run time __getattr__ answers
    from mideng.guard.cancellation import give_back, through

__all__ = ["give_back", "through"]
_HOMES = dict.fromkeys(__all__, cancellation)


__getattr__ = old_module(__name__, _HOMES)
