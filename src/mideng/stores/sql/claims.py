"""Deprecated: what a store remembers about its claims is ``mideng.stores.record_table.claims``;
this module goes in the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

import mideng.stores.record_table.claims
from mideng.moved import names_of, old_module

_HOMES = names_of(mideng.stores.record_table.claims)


__getattr__ = old_module(__name__, _HOMES)
