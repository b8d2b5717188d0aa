"""Deprecated: running handlers in turn is ``mideng.messaging.handlers``; this module goes in
the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from mideng.messaging import handlers
from mideng.moved import old_module

__getattr__ = old_module(
    __name__, dict.fromkeys(("TURN", "Turn", "handlers_done", "run_handler"), handlers)
)
