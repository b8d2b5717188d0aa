"""What a Guard learns once and looks up on every call: per body, its return type and whether
it is a coroutine function; both bounded, since bodies made per call (lambdas) come and go."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

from mideng.core.calls import is_async

#: Entries a table keeps at most before it starts over.
LIMIT = 4096


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
