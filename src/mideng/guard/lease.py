"""Moved to ``mideng.guard.heartbeat`` (``stats``) and its ``schedule`` (the rest); kept for one
release, its names answering with a DeprecationWarning."""

from __future__ import annotations

from typing import TYPE_CHECKING

import mideng.guard.heartbeat
from mideng.guard.heartbeat import schedule
from mideng.moved import old_module

if TYPE_CHECKING:  # what the names are, for type checkers; at run time __getattr__ answers
    from mideng.guard.heartbeat import stats
    from mideng.guard.heartbeat.schedule import STATS, Lease, Stats

__all__ = ["STATS", "Lease", "Stats", "stats"]
_HOMES = {"stats": mideng.guard.heartbeat, **dict.fromkeys(("STATS", "Lease", "Stats"), schedule)}


__getattr__ = old_module(__name__, _HOMES)
