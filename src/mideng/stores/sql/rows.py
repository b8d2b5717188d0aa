"""Deprecated: the record table's rows are ``mideng.stores.record_table.rows``; this module goes in
the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from typing import Any

import mideng.stores.record_table.rows
from mideng.moved import moved, names_of

_HOMES = names_of(mideng.stores.record_table.rows)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
