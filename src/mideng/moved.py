"""Import paths kept for one release after what they named moved elsewhere.

A module that moved (or whose names did) leaves its old path behind as a module of a few
lines: its ``__getattr__`` answers each name the old module had with the object it names now,
and a DeprecationWarning saying where to import it from. Nothing is imported again or copied:
the old name and the new one are the same object. Any package's old paths use it::

    __getattr__ = old_module(__name__, dict.fromkeys(("Site", "AsyncSite"), caller_connection))

with ``names_of(new_module)`` as the homes of a module moved whole. It imports nothing from
mideng, so any module may use it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
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


def old_module(old: str, homes: Mapping[str, ModuleType]) -> Callable[[str], Any]:
    """The ``__getattr__`` of module ``old``, whose names live in ``homes`` now."""

    def __getattr__(name: str) -> Any:
        return moved(old, name, homes)

    return __getattr__


def names_of(*modules: ModuleType) -> dict[str, ModuleType]:
    """The homes of a module moved whole (or split into ``modules``): each public name each
    of them holds, found in the first that holds it."""
    homes: dict[str, ModuleType] = {}
    for module in modules:
        for name in vars(module):
            if not name.startswith("_"):
                homes.setdefault(name, module)
    return homes
