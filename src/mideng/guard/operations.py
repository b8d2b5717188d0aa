"""Deprecated: the Guard's operation methods are ``mideng.operations.methods``; this module
goes in the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from mideng.moved import old_module
from mideng.operations import methods

_HOMES = {"Operations": methods}


__getattr__ = old_module(__name__, _HOMES)
