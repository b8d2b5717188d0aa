"""The operations registered with a Guard, by scope: what ``reconcile`` runs again.

``@guard.operation`` registers its function in the Guard it decorates with, so a reconcile
pass in this process finds, for an unfinished operation's scope, the function to run it with
and the types to rebuild its stored arguments to.
"""

from __future__ import annotations

import inspect
import typing
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mideng.core.callables import is_async

#: An operation run under a given key (the one it is stored under) with given arguments:
#: what reconcile calls, since arguments rebuilt from storage may render another key.
Rerun = Callable[[str | None, tuple[Any, ...], dict[str, Any]], Any]


@dataclass(frozen=True)
class Registered:
    """An operation's function as this process knows it."""

    wrapper: Callable[..., Any]
    rerun: Rerun
    signature: inspect.Signature
    hints: dict[str, Any]
    steps: tuple[str, ...]
    options: dict[str, Any]
    coroutine: bool


class Register:
    """The operations registered with one Guard, by scope."""

    _all: typing.ClassVar[weakref.WeakKeyDictionary[Any, Register]] = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self.scopes: dict[str, Registered] = {}

    @classmethod
    def of(cls, guard: Any) -> Register:
        found = cls._all.get(guard)
        if found is None:
            found = cls._all[guard] = cls()
        return found

    def add(
        self,
        scope: str,
        wrapper: Callable[..., Any],
        rerun: Rerun,
        fn: Callable[..., Any],
        steps: tuple[str, ...],
        options: dict[str, Any],
    ) -> None:
        try:
            hints = typing.get_type_hints(fn)
        except Exception:
            hints = {}
        self.scopes[scope] = Registered(
            wrapper,
            rerun,
            inspect.signature(fn),
            hints,
            steps,
            dict(options),
            is_async(fn),
        )
