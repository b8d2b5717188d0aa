"""Deprecated: steps are ``mideng.operations.steps``; this module goes in the next release.
Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from mideng.moved import old_module
from mideng.operations import steps

_HOMES = dict.fromkeys(
    (
        "Current",
        "Running",
        "check_name",
        "current_operation",
        "current_step",
        "running_operation",
        "step_wrapper",
    ),
    steps,
)


__getattr__ = old_module(__name__, _HOMES)
