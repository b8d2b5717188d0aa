"""Deprecated: ``RecordTable`` is ``mideng.stores.record_table``'s (``transactional``); this module
goes in the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

import mideng.stores.record_table.transactional
from mideng.moved import names_of, old_module

_HOMES = names_of(mideng.stores.record_table.transactional)


__getattr__ = old_module(__name__, _HOMES)
