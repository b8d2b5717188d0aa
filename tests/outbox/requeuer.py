"""One process of operators requeuing at once: T threads each requeue every seen row (half
of them front to back, half back to front).

Each ``Done`` is returned as the row's id, so the parent counts, across processes, how many
times each row was requeued.
"""

from __future__ import annotations

from sqlalchemy import create_engine

from mideng.core.answers import Done
from mideng.outbox.dead import SeenRow, requeue
from tests.helpers.together import together


def requeue_all(url: str, table: str, seen: list[tuple[str, int]], threads: int) -> list[str]:
    engine = create_engine(url, pool_size=threads)
    rows = [SeenRow(row_id, attempts) for row_id, attempts in seen]

    def operator(n: int) -> list[str]:
        order = rows if n % 2 == 0 else rows[::-1]
        return [
            row.id for row in order if isinstance(requeue(engine, [row], table=table)[row.id], Done)
        ]

    try:
        return together(threads, operator)
    finally:
        engine.dispose()
