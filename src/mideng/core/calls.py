"""What calling a user's callable gives, told before it is called.

``inspect.iscoroutinefunction`` answers False for an object whose ``__call__`` is an ``async
def`` (a handler class) and for a ``functools.partial`` over one; such a callable run as a sync
one gives back a coroutine that nobody awaits, so its body would never run while its message
or call counted as done.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` gives a coroutine: an ``async def``, a bound method or partial of
    one, or an object whose class defines ``async def __call__``."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    if inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isbuiltin(fn):
        return False
    return callable(fn) and inspect.iscoroutinefunction(type(fn).__call__)
