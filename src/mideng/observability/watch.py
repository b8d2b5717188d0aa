"""Moved to ``mideng.observability.observers``; kept for one release, its names answering with
a DeprecationWarning, while mideng.messaging still reads them here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mideng.moved import old_module
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


__getattr__ = old_module(__name__, _HOMES)
