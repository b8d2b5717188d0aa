"""Deprecated: a kept claim's completion is ``mideng.stores.sql.execute``'s; this module goes in
the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from typing import Any

import mideng.stores.sql.execute
from mideng.moved import moved

_HOMES = dict.fromkeys(("acomplete_known", "complete_known"), mideng.stores.sql.execute)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
