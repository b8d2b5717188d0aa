"""Deprecated: ``LocalBatch`` is ``mideng.stores.batch``'s; this module goes in the next release.
Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

import mideng.stores.batch
from mideng.moved import old_module

_HOMES = {"LocalBatch": mideng.stores.batch}


__getattr__ = old_module(__name__, _HOMES)
