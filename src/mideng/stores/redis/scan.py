"""Deprecated: the Redis store's survey is ``mideng.stores.redis.survey``; this module goes in the
next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

import mideng.stores.redis.survey
from mideng.moved import names_of, old_module

_HOMES = names_of(mideng.stores.redis.survey)


__getattr__ = old_module(__name__, _HOMES)
