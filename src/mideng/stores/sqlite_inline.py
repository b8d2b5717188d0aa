"""Deprecated: the SQLite store's calls in place are ``mideng.stores.sqlite.store``'s; this module
goes in the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from typing import Any

import mideng.stores.sqlite.store
from mideng.moved import moved

_HOMES = dict.fromkeys(("CHECKPOINT_ROWS", "INLINE", "waited"), mideng.stores.sqlite.store)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
