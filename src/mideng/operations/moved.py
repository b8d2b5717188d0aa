"""The import paths multi-step operations had before they were one package, kept for one
release: ``mideng.effects`` and ``mideng.guard.operations`` / ``steps`` / ``recovery``.

Each old module's ``__getattr__`` answers a moved name with the object it names now, and a
DeprecationWarning saying where to import it from.
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
