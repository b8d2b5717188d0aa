"""Deprecated: the Redis store's survey is ``mideng.stores.redis.survey``; this module goes in the
next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from typing import Any

import mideng.stores.redis.survey
from mideng.moved import moved, names_of

_HOMES = names_of(mideng.stores.redis.survey)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
