"""Deprecated: the record table's schema is ``mideng.stores.record_table.schema``; this module
goes in the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

import mideng.stores.record_table.schema
from mideng.moved import names_of, old_module

__all__ = mideng.stores.record_table.schema.__all__
_HOMES = names_of(mideng.stores.record_table.schema)


__getattr__ = old_module(__name__, _HOMES)
