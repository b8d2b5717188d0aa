"""``stale``: the task table's "RUNNING too long: a human should look" rule.

A processing record is stale when its holder stopped renewing its lease (it died), or, given
``older_than``, when it has run longer than that since it was first claimed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mideng.core import effects
from mideng.core.effects import Effects
from mideng.core.record import Record
from mideng.guard.driver import Driver
from mideng.observability import logs
from mideng.operations.pending import store_of
from mideng.operations.results import StaleTask


def _stale(
    records: list[Record],
    older_than: float | None,
    alert: Callable[[list[StaleTask]], Any] | None,
) -> list[StaleTask]:
    now = time.time()
    found = []
    for record in records:
        running_for = now - record.created_at
        if not record.lease_live(now):
            until = record.lease_until or record.updated_at
            reason = f"its holder stopped renewing (lease ran out {now - until:.1f}s ago)"
        elif older_than is not None and running_for > older_than:
            reason = f"running for {running_for:.1f}s, over {older_than:g}s"
        else:
            continue
        logs.stale_task(record.scope, record.key, reason)
        found.append(StaleTask(record, reason, running_for))
    if found and alert is not None:
        alert(found)
    return found


def stale(
    guard: Driver,
    older_than: float | None,
    scope: str | None,
    limit: int,
    alert: Callable[[list[StaleTask]], Any] | None,
) -> Effects[list[StaleTask]]:
    """Processing records whose holder stopped renewing, or that ran past ``older_than``."""
    store = store_of(guard)
    records = yield effects.call(store.running, store.arunning, scope, limit)
    return _stale(records, older_than, alert)
