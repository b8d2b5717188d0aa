"""Reconcile loops: a worker that finishes operations whose holders died, every so often.

The other way to run reconcile is cron running ``mideng operations reconcile``. A pass that
fails as a whole (the store could not list the operations) is logged, and the loop goes on.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from mideng.observability import logs
from mideng.operations.methods import Operations
from mideng.operations.reconcile import MIN_AGE
from mideng.operations.results import Reconciled


def reconcile_forever(
    guard: Operations,
    every: float,
    *,
    scope: str | None = None,
    stop: threading.Event | None = None,
    report: Callable[[list[Reconciled]], Any] | None = None,
    min_age: float = MIN_AGE,
) -> None:
    """Reconcile every ``every`` seconds until ``stop`` is set (a worker's thread or main);
    operations begun less than ``min_age`` seconds ago are left to their callers."""
    stop = stop or threading.Event()
    while not stop.is_set():
        try:
            done = guard.reconcile(scope, min_age=min_age)
        except Exception as exc:  # the store may answer the next pass: the loop goes on
            _failed_pass(scope, exc)
            done = []
        if report is not None and done:
            report(done)
        stop.wait(every)


async def areconcile_forever(
    guard: Operations,
    every: float,
    *,
    scope: str | None = None,
    report: Callable[[list[Reconciled]], Any] | None = None,
    min_age: float = MIN_AGE,
) -> None:
    """``reconcile_forever`` as a task: cancel it to stop."""
    while True:
        try:
            done = await guard.areconcile(scope, min_age=min_age)
        except Exception as exc:  # the store may answer the next pass: the loop goes on
            _failed_pass(scope, exc)
            done = []
        if report is not None and done:
            report(done)
        await asyncio.sleep(every)


def _failed_pass(scope: str | None, exc: Exception) -> None:
    """A whole pass failed (the store could not list the operations): logged, tried again."""
    logs.reconcile_failed(scope or "(every scope)", "(the pass)", exc)
