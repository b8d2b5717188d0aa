"""Moved to ``mideng.guard.owner_ids``; kept for one release, its names answering with a
DeprecationWarning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mideng.guard import owner_ids
from mideng.moved import old_module

if TYPE_CHECKING:  # what the names are, for type checkers; at run time __getattr__ answers
    from mideng.guard.owner_ids import OWNERS, new_owner

__all__ = ["OWNERS", "new_owner"]
_HOMES = dict.fromkeys(__all__, owner_ids)


__getattr__ = old_module(__name__, _HOMES)
