"""Moved to ``mideng.guard.cancellation``; kept for one release, its names answering with a
DeprecationWarning, while mideng.messaging still imports them here."""

from __future__ import annotations

from typing import Any

from mideng.guard import cancellation
from mideng.moved import moved

_HOMES = dict.fromkeys(("give_back", "through"), cancellation)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
