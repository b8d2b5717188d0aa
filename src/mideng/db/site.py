"""Moved to ``mideng.db.caller_connection`` (``Site`` and ``AsyncSite`` are also
``mideng.db``'s); kept for one release, its names answering with a DeprecationWarning."""

from __future__ import annotations

from typing import Any

from mideng.db import caller_connection
from mideng.moved import moved

_HOMES = dict.fromkeys(("AsyncSite", "Site", "aexecute_for", "execute_for"), caller_connection)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, _HOMES)
