"""The process-wide default Guard used by the module-level ``@idempotent``.

Resolved on the first guarded call, not at import: ``configure()`` may run after the decorated
module was imported. Without ``configure()``, ``MIDENG_STORE`` names the store, else the
embedded SQLite file ``mideng.db`` in the working directory.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, overload

from mideng.core.keys import KeySpec
from mideng.guard.decorator import build
from mideng.guard.guard import Guard
from mideng.stores.base import Store

P = ParamSpec("P")
R = TypeVar("R")
DEFAULT_STORE = "sqlite:///mideng.db"
_lock = threading.Lock()
_default: Guard | None = None


def configure(store: Store | str | None = None, **options: Any) -> Guard:
    """Set the default Guard: a store (URL or object) and Guard options (lease, ttl, ...)."""
    global _default
    guard = Guard(store or os.environ.get("MIDENG_STORE") or DEFAULT_STORE, **options)
    with _lock:
        old, _default = _default, guard
    if old is not None and old.store is not guard.store:
        old.close()
    return guard


def default_guard() -> Guard:
    global _default
    guard = _default
    if guard is None:
        with _lock:
            if _default is None:
                _default = Guard(os.environ.get("MIDENG_STORE") or DEFAULT_STORE)
            guard = _default
    return guard


@overload
def idempotent(scope: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def idempotent(
    scope: str, /, *, key: KeySpec = None, payload: Callable[..., Any] | None = None, **options: Any
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def idempotent(
    scope: str | Callable[P, R],
    /,
    *,
    key: KeySpec = None,
    payload: Callable[..., Any] | None = None,
    **options: Any,
) -> Any:
    """``@idempotent("order_create", key="{order.id}")`` on the default Guard."""
    return build(default_guard, scope, key, payload, options)
