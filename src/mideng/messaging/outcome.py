"""Deprecated: the verdict rules are ``mideng.messaging.verdict``; this module goes in the next
release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from mideng.messaging import verdict
from mideng.moved import old_module

__getattr__ = old_module(
    __name__, dict.fromkeys(("MIN_DELAY", "RetryRules", "after_failure", "standing"), verdict)
)
