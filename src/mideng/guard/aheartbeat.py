"""Moved to ``mideng.guard.heartbeat.tasks``; kept for one release, its names answering with a
DeprecationWarning, while mideng.messaging still imports them here."""

from __future__ import annotations

from typing import Any

from mideng.guard.heartbeat import tasks
from mideng.moved import moved

_HOMES = dict.fromkeys(("AsyncBeat", "Pending", "hold_async", "renew_store", "start_async"), tasks)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
