"""Deprecated: the record table's schema is ``mideng.stores.record_table.schema``; this module
goes in the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from typing import Any

import mideng.stores.record_table.schema
from mideng.moved import moved, names_of

__all__ = mideng.stores.record_table.schema.__all__
_HOMES = names_of(mideng.stores.record_table.schema)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
