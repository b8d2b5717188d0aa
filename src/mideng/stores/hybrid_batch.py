"""Deprecated: ``HybridBatch`` is ``mideng.stores.hybrid.batch``'s; this module goes in the next
release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

import mideng.stores.hybrid.batch
from mideng.moved import old_module

_HOMES = {"HybridBatch": mideng.stores.hybrid.batch}


__getattr__ = old_module(__name__, _HOMES)
