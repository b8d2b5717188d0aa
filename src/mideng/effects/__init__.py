"""Multi-step operations: partial success that resumes at the first unfinished step.

``@guard.operation(scope, key=...)`` and ``@guard.step(name)`` (mideng.guard.operations) make
the operation; this package holds what the code inside it and the operators around it use:

- ``step_key()``: inside a running step, its deterministic downstream key, to send to a
  remote API as its Idempotency-Key, so a step killed after the remote call but before its
  record is re-sent with the same key and the provider dedupes it;
- ``reconcile_forever`` / ``areconcile_forever``: a worker loop that finishes operations
  whose holders died (the other way is cron running ``mideng operations reconcile``);
- the report types of ``guard.pending()``, ``guard.reconcile()`` and ``guard.stale()``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from mideng.errors import ConfigurationError
from mideng.guard.guard import Guard
from mideng.guard.recovery import PendingOperation, Reconciled, StaleTask
from mideng.guard.steps import current_step
from mideng.observability import logs


def step_key() -> str:
    """The running step's downstream key: the same on every run of this step of this
    operation (scope, key, step name and call number), unique to it."""
    current = current_step()
    if current is None:
        raise ConfigurationError(
            "step_key() is only known inside a running step (a function decorated with "
            "@guard.step, called by a running @guard.operation)"
        )
    return current.key


def step_id() -> str:
    """The running step's identity in its operation: ``name#n`` (the n-th call of name)."""
    current = current_step()
    if current is None:
        raise ConfigurationError("step_id() is only known inside a running step")
    return current.step


def reconcile_forever(
    guard: Guard,
    every: float,
    *,
    scope: str | None = None,
    stop: threading.Event | None = None,
    report: Callable[[list[Reconciled]], Any] | None = None,
) -> None:
    """Reconcile every ``every`` seconds until ``stop`` is set (a worker's thread or main)."""
    stop = stop or threading.Event()
    while not stop.is_set():
        try:
            done = guard.reconcile(scope)
        except Exception as exc:  # the store may answer the next pass: the loop goes on
            _failed_pass(scope, exc)
            done = []
        if report is not None and done:
            report(done)
        stop.wait(every)


async def areconcile_forever(
    guard: Guard,
    every: float,
    *,
    scope: str | None = None,
    report: Callable[[list[Reconciled]], Any] | None = None,
) -> None:
    """``reconcile_forever`` as a task: cancel it to stop."""
    while True:
        try:
            done = await guard.areconcile(scope)
        except Exception as exc:  # the store may answer the next pass: the loop goes on
            _failed_pass(scope, exc)
            done = []
        if report is not None and done:
            report(done)
        await asyncio.sleep(every)


def _failed_pass(scope: str | None, exc: Exception) -> None:
    """A whole pass failed (the store could not list the operations): logged, tried again."""
    logs.reconcile_failed(scope or "(every scope)", "(the pass)", exc)


__all__ = [
    "PendingOperation",
    "Reconciled",
    "StaleTask",
    "areconcile_forever",
    "reconcile_forever",
    "step_id",
    "step_key",
]
