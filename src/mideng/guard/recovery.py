"""Deprecated: the operator views are ``mideng.operations`` (``pending``, ``reconcile``,
``stale``, their answers in ``results``); this module goes in the next release. Its names
still answer, with a DeprecationWarning."""

from __future__ import annotations

import mideng.operations.pending
import mideng.operations.reconcile
import mideng.operations.register
import mideng.operations.stale
from mideng.moved import old_module

_HOMES = {
    **dict.fromkeys(("PendingOperation", "Reconciled", "StaleTask"), mideng.operations),
    **dict.fromkeys(("Register", "Registered", "Rerun"), mideng.operations.register),
    **dict.fromkeys(("apending", "pending", "state_of"), mideng.operations.pending),
    **dict.fromkeys(("RUNNABLE", "call_of", "reconcile"), mideng.operations.reconcile),
    "stale": mideng.operations.stale,
}


__getattr__ = old_module(__name__, _HOMES)
