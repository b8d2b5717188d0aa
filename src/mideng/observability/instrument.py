"""Moved to ``mideng.observability.store_metrics``; kept for one release, its names answering
with a DeprecationWarning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mideng.moved import old_module
from mideng.observability import store_metrics

if TYPE_CHECKING:  # what the names are, for type checkers; at run time __getattr__ answers
    from mideng.observability.store_metrics import (
        CountedStore,
        Counting,
        Meter,
        counted,
        meter_of,
        uncounted,
    )

__all__ = ["CountedStore", "Counting", "Meter", "counted", "meter_of", "uncounted"]
_HOMES = dict.fromkeys(__all__, store_metrics)


__getattr__ = old_module(__name__, _HOMES)
