"""Import paths kept for one release after what they named moved.

A module that moved, or lost names to another, answers each of its former names from a module
``__getattr__``: ``moved`` gives the object the name stands for now, with a DeprecationWarning
saying where to import it from. Nothing is imported again or copied: the old name and the new
one are the same object.

    from mideng._compat import moved, names_of
    from mideng.stores.record_table import ops

    _HOMES = names_of(ops)

    def __getattr__(name: str) -> Any:
        return moved(__name__, name, _HOMES)
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


def names_of(*modules: ModuleType) -> dict[str, ModuleType]:
    """The homes of a module moved whole (or split into ``modules``): each public name each
    of them holds, found in the first that holds it."""
    homes: dict[str, ModuleType] = {}
    for module in modules:
        for name in vars(module):
            if not name.startswith("_"):
                homes.setdefault(name, module)
    return homes
