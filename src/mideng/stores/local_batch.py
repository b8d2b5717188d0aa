"""Deprecated: ``LocalBatch`` is ``mideng.stores.batch``'s; this module goes in the next release.
Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from typing import Any

import mideng.stores.batch
from mideng.moved import moved

_HOMES = {"LocalBatch": mideng.stores.batch}


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
