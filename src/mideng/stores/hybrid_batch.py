"""Deprecated: ``HybridBatch`` is ``mideng.stores.hybrid.batch``'s; this module goes in the next
release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from typing import Any

import mideng.stores.hybrid.batch
from mideng.moved import moved

_HOMES = {"HybridBatch": mideng.stores.hybrid.batch}


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
