"""Deprecated: the SQLite store's calls in place are ``mideng.stores.sqlite.store``'s; this module
goes in the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

import mideng.stores.sqlite.store
from mideng.moved import old_module

_HOMES = dict.fromkeys(("CHECKPOINT_ROWS", "INLINE", "waited"), mideng.stores.sqlite.store)


__getattr__ = old_module(__name__, _HOMES)
