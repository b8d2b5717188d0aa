"""Import paths that moved, kept for one release.

A module that moved (or whose names did) leaves its old path behind as a module of a few lines:
its ``__getattr__`` answers each name the old module had with the object it names now, and a
DeprecationWarning saying where to import it from. Any package's old paths use it::

    _HOMES = dict.fromkeys(("Site", "AsyncSite"), caller_connection)


    def __getattr__(name: str) -> Any:
        return moved(__name__, name, _HOMES)

It imports nothing from mideng, so any module may use it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from types import ModuleType
from typing import Any


def moved(old: str, name: str, homes: Mapping[str, ModuleType]) -> Any:
    """``name`` of module ``old``, from the module it lives in now (``homes[name]``)."""
    home = homes.get(name)
    if home is None:
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    warnings.warn(
        f"{old}.{name} is deprecated and goes in the next release: "
        f"import {name} from {home.__name__}",
        DeprecationWarning,
        stacklevel=3,  # the code that asked the old module for the name
    )
    return vars(home)[name]
