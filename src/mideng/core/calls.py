"""Moved to ``mideng.core.callables``; kept for one release, its names answering with a
DeprecationWarning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mideng.core import callables
from mideng.moved import old_module

if TYPE_CHECKING:  # what the names are, for type checkers; at run time __getattr__ answers
    from mideng.core.callables import is_async

__all__ = ["is_async"]
_HOMES = dict.fromkeys(__all__, callables)


__getattr__ = old_module(__name__, _HOMES)
