"""Moved to ``mideng.observability.store_metrics``; kept for one release, its names answering
with a DeprecationWarning, while mideng.messaging still imports them here."""

from __future__ import annotations

from typing import Any

from mideng.moved import moved
from mideng.observability import store_metrics

_HOMES = dict.fromkeys(
    ("CountedStore", "Counting", "Meter", "counted", "meter_of", "uncounted"), store_metrics
)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
