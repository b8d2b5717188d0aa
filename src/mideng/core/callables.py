"""What mideng learns of a user's callable before it calls it: whether calling it gives a
coroutine (``is_async``) and the return type it declares (``return_hint``), which a replay
rebuilds; ``learn`` keeps both per callable in a table looked up on every call.

``inspect.iscoroutinefunction`` answers False for an object whose ``__call__`` is an ``async
def`` (a handler class) and for a ``functools.partial`` over one; such a callable run as a sync
one gives back a coroutine that nobody awaits, so its body would never run while its message
or call counted as done.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

#: Entries a table of ``learn`` keeps at most before it starts over: callables made per call
#: (lambdas) come and go.
LIMIT = 4096


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


def return_hint(fn: Callable[..., Any]) -> Any:
    """The declared return type, so a replay rebuilds it; None when absent or unresolvable."""
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:
        return None
    return None if hint is type(None) else hint


def learn(
    bodies: dict[Callable[..., Any], tuple[Any, bool]], fn: Callable[..., Any]
) -> tuple[Any, bool]:
    """``fn``'s (return type, is a coroutine function), from ``bodies`` or worked out there."""
    known = bodies.get(fn)
    if known is None:
        if len(bodies) >= LIMIT:
            bodies.clear()
        known = bodies[fn] = (return_hint(fn), is_async(fn))
    return known
