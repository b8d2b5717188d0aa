"""Moved to ``mideng.core.event_loop``; kept for one release, its names answering with a
DeprecationWarning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mideng.core import event_loop
from mideng.moved import old_module

if TYPE_CHECKING:  # what the names are, for type checkers; at run time __getattr__ answers
    from mideng.core.event_loop import running_loop, to_thread

__all__ = ["running_loop", "to_thread"]
_HOMES = dict.fromkeys(__all__, event_loop)


__getattr__ = old_module(__name__, _HOMES)
