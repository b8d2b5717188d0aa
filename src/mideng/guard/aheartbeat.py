"""Moved to ``mideng.guard.heartbeat.tasks``; kept for one release, its names answering with a
DeprecationWarning, while mideng.messaging still imports them here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mideng.guard.heartbeat import tasks
from mideng.moved import moved

if TYPE_CHECKING:  # what the names are, for type checkers; at run time __getattr__ answers
    from mideng.guard.heartbeat.tasks import (
        AsyncBeat,
        Pending,
        hold_async,
        renew_store,
        start_async,
    )

__all__ = ["AsyncBeat", "Pending", "hold_async", "renew_store", "start_async"]
_HOMES = dict.fromkeys(__all__, tasks)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
