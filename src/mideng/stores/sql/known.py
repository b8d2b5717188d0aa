"""Deprecated: a kept claim's completion is ``mideng.stores.sql.execute``'s; this module goes in
the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

import mideng.stores.sql.execute
from mideng.moved import old_module

_HOMES = dict.fromkeys(("acomplete_known", "complete_known"), mideng.stores.sql.execute)


__getattr__ = old_module(__name__, _HOMES)
