"""One process of operators reconciling at once: T threads each reconcile every operation, as
seen. Each run of the operation's step appends its order to a shared file (O_APPEND, one write
a line), so the parent counts real runs across processes."""

from __future__ import annotations

import os
from typing import Any

from mideng import Guard, open_store
from mideng.core.answers import Done
from mideng.operations import OperationState, SeenOperation
from tests.helpers.together import together


def reconcile_all(
    url: str,
    options: dict[str, Any],
    scope: str,
    seen: dict[str, tuple[str, int | None]],
    threads: int,
    runs_file: str,
) -> list[str]:
    store = open_store(url, **options)
    guard = Guard(store, lease=30)
    fd = os.open(runs_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    @guard.step("charge")
    def charge(order: str, amount: int) -> str:
        os.write(fd, f"{order}\n".encode())
        return f"{order}:{amount}"

    @guard.operation(scope, key="{order}", steps=("charge",))
    def pay(order: str, amount: int) -> str:
        return charge(order, amount)

    def operator(n: int) -> list[str]:
        done = []
        for order, (state, fence) in seen.items():
            as_seen = SeenOperation(OperationState(state), fence)
            if isinstance(guard.reconcile_operation(scope, order, as_seen), Done):
                done.append(order)
        return done

    try:
        return together(threads, operator)
    finally:
        os.close(fd)
        store.close()
