"""Moved to ``mideng.observability.observers``; kept for one release, its names answering with
a DeprecationWarning, while mideng.messaging still reads them here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mideng.moved import moved
from mideng.observability import observers

if TYPE_CHECKING:  # what the names are, for type checkers; at run time __getattr__ answers
    from mideng.observability.observers import (
        Metrics,
        Observer,
        TracedStore,
        Tracing,
        install,
        metrics,
        on,
        store_label,
    )

__all__ = [
    "Metrics",
    "Observer",
    "TracedStore",
    "Tracing",
    "install",
    "metrics",
    "on",
    "store_label",
]
_HOMES = dict.fromkeys(__all__, observers)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
