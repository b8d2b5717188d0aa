"""Deprecated: multi-step operations are ``mideng.operations``; this name goes in the next
release. Every name it had still answers, with a DeprecationWarning."""

from __future__ import annotations

import mideng.operations
from mideng.moved import old_module

_HOMES = dict.fromkeys(mideng.operations.__all__, mideng.operations)


__getattr__ = old_module(__name__, _HOMES)
