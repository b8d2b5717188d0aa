"""Moved to ``mideng.guard.owner_ids``; kept for one release, its names answering with a
DeprecationWarning, while mideng.messaging still imports them here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mideng.guard import owner_ids
from mideng.moved import moved

if TYPE_CHECKING:  # what the names are, for type checkers; at run time __getattr__ answers
    from mideng.guard.owner_ids import OWNERS, new_owner

__all__ = ["OWNERS", "new_owner"]
_HOMES = dict.fromkeys(__all__, owner_ids)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
