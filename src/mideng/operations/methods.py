"""The Guard's methods for multi-step operations: ``operation``, ``step``, and the operator
views ``pending``, ``reconcile`` and ``stale`` with their async twins, and the operator's
action on one operation, ``reconcile_operation``.

``Guard`` mixes in ``Operations``; each method is written against the Driver protocol and
hands its work to the module of this package that holds it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

from mideng.core import effects
from mideng.core.answers import Changed, Done, Gone
from mideng.core.keys import KeySpec, check_scope
from mideng.errors import ConfigurationError
from mideng.guard.driver import Driver
from mideng.operations.operation import operation
from mideng.operations.pending import apending, pending
from mideng.operations.reconcile import MIN_AGE, reconcile, reconcile_one
from mideng.operations.results import PendingOperation, Reconciled, SeenOperation, StaleTask
from mideng.operations.stale import stale
from mideng.operations.steps import check_name, step_wrapper

F = TypeVar("F", bound=Callable[..., Any])


class Operations:
    """The Guard's multi-step operations (mixed into Guard; written against Driver)."""

    def operation(
        self,
        scope: str,
        /,
        *,
        key: KeySpec = None,
        steps: tuple[str, ...] | list[str] | None = None,
        payload: Callable[..., Any] | None = None,
        **options: Any,
    ) -> Callable[[F], F]:
        """Decorate a ``def`` or ``async def`` whose steps resume where a failed run stopped.

        ``key``, ``payload`` and the options are ``idempotent``'s. ``steps``: the step names
        the body calls, in order, so ``pending`` can say which are left. The arguments are
        stored with the scope's codec when the operation starts, so ``reconcile`` can run an
        unfinished one again; the function is registered for its scope in this Guard.
        """
        return operation(cast(Driver, self), scope, key, steps, payload, options)

    def step(
        self, name: str, /, *, conn: str | None = None, key_arg: str | None = None
    ) -> Callable[[F], F]:
        """Decorate a function an operation calls for one effect.

        ``conn``: the name of the step's argument holding the caller's SQLAlchemy connection
        (or session, or Django connection); the step's record is then written on it, so it
        commits (or rolls back) with the step's own writes. ``key_arg``: the name of an
        argument that receives the step's downstream key (as ``mideng.operations.step_key()``
        gives it), to pass on as an Idempotency-Key.
        """
        check_name(name)

        def decorate(fn: F) -> F:
            return cast(F, step_wrapper(name, conn, key_arg, fn))

        return decorate

    # -- the operator views -------------------------------------------------------------------
    def pending(self, scope: str | None = None, limit: int = 100) -> list[PendingOperation]:
        """Unfinished operations: state, steps done and left, attempts, since when."""
        return pending(cast(Driver, self), _scope(scope), limit)

    async def apending(self, scope: str | None = None, limit: int = 100) -> list[PendingOperation]:
        return await apending(cast(Driver, self), _scope(scope), limit)

    def reconcile(
        self,
        scope: str | None = None,
        limit: int = 100,
        *,
        plan: bool = False,
        min_age: float = MIN_AGE,
    ) -> list[Reconciled]:
        """Run every unfinished operation whose holder is gone again, with its stored
        arguments, through the function registered for its scope; report each. One begun
        less than ``min_age`` seconds ago is left to its caller's retry (``left_to_caller``).
        ``plan``: report what it would do (``would_run``, ``would_clear``), changing nothing."""
        pass_ = reconcile(cast(Driver, self), _scope(scope), limit, plan, _age(min_age))
        return effects.run(pass_)

    async def areconcile(
        self,
        scope: str | None = None,
        limit: int = 100,
        *,
        plan: bool = False,
        min_age: float = MIN_AGE,
    ) -> list[Reconciled]:
        pass_ = reconcile(cast(Driver, self), _scope(scope), limit, plan, _age(min_age))
        return await effects.arun(pass_)

    def reconcile_operation(
        self, scope: str, key: str, seen: SeenOperation
    ) -> Done[Reconciled] | Changed[PendingOperation] | Gone:
        """Run one operation again if it is still as ``seen`` (``item.seen`` of ``pending``):
        ``Done(now=Reconciled)``, ``Changed(now=PendingOperation)`` or ``Gone``."""
        return effects.run(reconcile_one(cast(Driver, self), check_scope(scope), key, seen))

    async def areconcile_operation(
        self, scope: str, key: str, seen: SeenOperation
    ) -> Done[Reconciled] | Changed[PendingOperation] | Gone:
        return await effects.arun(reconcile_one(cast(Driver, self), check_scope(scope), key, seen))

    def stale(
        self,
        older_than: float | None = None,
        scope: str | None = None,
        *,
        limit: int = 1000,
        alert: Callable[[list[StaleTask]], Any] | None = None,
    ) -> list[StaleTask]:
        """Processing records whose holder stopped renewing, or (``older_than`` seconds)
        that have run too long; ``alert`` is called with them when there are any."""
        return effects.run(stale(cast(Driver, self), older_than, _scope(scope), limit, alert))

    async def astale(
        self,
        older_than: float | None = None,
        scope: str | None = None,
        *,
        limit: int = 1000,
        alert: Callable[[list[StaleTask]], Any] | None = None,
    ) -> list[StaleTask]:
        found = stale(cast(Driver, self), older_than, _scope(scope), limit, alert)
        return await effects.arun(found)


def _scope(scope: str | None) -> str | None:
    return None if scope is None else check_scope(scope)


def _age(seconds: float) -> float:
    # Compared so that NaN fails too: a NaN age would leave every operation to its caller.
    if not 0 <= seconds < math.inf:
        raise ConfigurationError(f"min_age must be a finite number of seconds >= 0: {seconds}")
    return float(seconds)
