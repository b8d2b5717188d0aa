"""Deprecated: the record table's operations are ``mideng.stores.record_table.ops``; this module
goes in the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

import mideng.stores.record_table.ops
from mideng.moved import names_of, old_module

_HOMES = names_of(mideng.stores.record_table.ops)


__getattr__ = old_module(__name__, _HOMES)
