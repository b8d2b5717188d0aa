"""Deprecated: steps are ``mideng.operations.steps``; this module goes in the next release.
Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from typing import Any

from mideng._compat import moved
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


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
