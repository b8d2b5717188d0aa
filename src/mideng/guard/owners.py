"""Moved to ``mideng.guard.owner_ids``; kept for one release, its names answering with a
DeprecationWarning, while mideng.messaging still imports them here."""

from __future__ import annotations

from typing import Any

from mideng.guard import owner_ids
from mideng.moved import moved

_HOMES = dict.fromkeys(("OWNERS", "new_owner"), owner_ids)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
