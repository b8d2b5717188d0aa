"""Moved to ``mideng.db.caller_connection`` (``Site`` and ``AsyncSite`` are also
``mideng.db``'s); kept for one release, its names answering with a DeprecationWarning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mideng.db import caller_connection
from mideng.moved import old_module

if TYPE_CHECKING:  # what the names are, for type checkers; at run time __getattr__ answers
    from mideng.db.caller_connection import AsyncSite, Site, aexecute_for, execute_for

__all__ = ["AsyncSite", "Site", "aexecute_for", "execute_for"]
_HOMES = dict.fromkeys(__all__, caller_connection)


__getattr__ = old_module(__name__, _HOMES)
