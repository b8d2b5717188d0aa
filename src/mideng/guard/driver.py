"""The Driver protocol: what code that runs guarded work calls on a Guard.

The decorator, the HTTP exchange, operations and message consumers all guard work the same
way: resolve the scope's policy, ``prepare`` a call (checked scope and key, fingerprint,
owner, request id), then ``drive`` it (sync) or ``adrive`` it (async) through the pipeline
(mideng.guard.pipeline), with the Guard's terms or their own. Transactional mode prepares its
call the same way and asks the call's decisions around the caller's block. Code written against this
protocol needs no Guard import, so none of it can pull the Guard into an import circle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from mideng.core.flow import Call
from mideng.core.policy import Policy
from mideng.guard.pipeline import TERMS, Args, AsyncBody, Body, Kwargs, Terms
from mideng.stores.base import Store

R = TypeVar("R")


class Driver(Protocol):
    store: Store

    def policy(self, scope: str, **overrides: Any) -> Policy:
        """The scope's policy with ``overrides`` applied (the same object when none)."""

    def prepare(
        self, scope: str, key: str, fn: Body, payload: Any, policy: Policy | None = None
    ) -> Call:
        """A call ready to drive: InvalidKeyError / ConfigurationError before any store I/O."""

    def drive(
        self, call: Call, fn: Callable[..., R], args: Args, kwargs: Kwargs, terms: Terms = TERMS
    ) -> R:
        """Claim and run ``fn(*args, **kwargs)`` once, or replay / raise / wait and replay
        (mideng.guard.pipeline; ``terms``: an entry's own decisions)."""

    def adrive(
        self, call: Call, fn: AsyncBody[R], args: Args, kwargs: Kwargs, terms: Terms = TERMS
    ) -> Awaitable[R]:
        """``drive`` for a coroutine function, on the running loop: awaited by the caller."""
