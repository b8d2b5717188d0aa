"""Deprecated: SQLite's statements and operations are ``mideng.stores.sqlite.statements`` and
``mideng.stores.sqlite.ops``; this module goes in the next release. Its names still answer, with
a DeprecationWarning."""

from __future__ import annotations

from typing import Any

import mideng.stores.sqlite.ops
import mideng.stores.sqlite.statements
from mideng.moved import moved, names_of

_HOMES = names_of(mideng.stores.sqlite.statements, mideng.stores.sqlite.ops)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
