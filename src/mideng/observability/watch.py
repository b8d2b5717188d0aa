"""Moved to ``mideng.observability.observers``; kept for one release, its names answering with
a DeprecationWarning, while mideng.messaging still reads them here."""

from __future__ import annotations

from typing import Any

from mideng.moved import moved
from mideng.observability import observers

_HOMES = dict.fromkeys(
    ("Metrics", "Observer", "TracedStore", "Tracing", "install", "metrics", "on", "store_label"),
    observers,
)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
