"""Deprecated: SQLite's statements and operations are ``mideng.stores.sqlite.statements`` and
``mideng.stores.sqlite.ops``; this module goes in the next release. Its names still answer, with
a DeprecationWarning."""

from __future__ import annotations

import mideng.stores.sqlite.ops
import mideng.stores.sqlite.statements
from mideng.moved import names_of, old_module

_HOMES = names_of(mideng.stores.sqlite.statements, mideng.stores.sqlite.ops)


__getattr__ = old_module(__name__, _HOMES)
