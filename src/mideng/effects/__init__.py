"""Deprecated: multi-step operations are ``mideng.operations``; this name goes in the next
release. Every name it had still answers, with a DeprecationWarning."""

from __future__ import annotations

from typing import Any

import mideng.operations
from mideng._compat import moved

_HOMES = dict.fromkeys(mideng.operations.__all__, mideng.operations)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
