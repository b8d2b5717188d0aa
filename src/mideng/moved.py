"""Import paths kept for one release after what they named moved elsewhere.

An old module keeps only its ``__getattr__``: it answers each moved name with the object it
names now, and a DeprecationWarning saying where to import it from.

    __getattr__ = old_module(__name__, dict.fromkeys(("AmqpPublisher",), rabbitmq.publish))
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
