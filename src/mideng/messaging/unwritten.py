"""Deprecated: completions the store could not take are ``mideng.messaging.kept_completions``;
this module goes in the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from mideng.messaging import kept_completions
from mideng.moved import old_module

__getattr__ = old_module(
    __name__,
    dict.fromkeys(
        ("HELD_LIMIT", "Unwritten", "finish", "kept", "release_quietly", "write_kept"),
        kept_completions,
    ),
)
