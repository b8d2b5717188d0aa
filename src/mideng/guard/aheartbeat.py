"""Moved to ``mideng.guard.heartbeat.tasks``; kept for one release, its names answering with a
DeprecationWarning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mideng.guard.heartbeat import tasks
from mideng.moved import old_module

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


__getattr__ = old_module(__name__, _HOMES)
