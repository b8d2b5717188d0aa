"""One process of operators requeuing at once: T threads each requeue every seen row.

Each ``Done`` is returned as the row's id, so the parent counts, across processes, how many
times each row was requeued.
"""

from __future__ import annotations

import threading

from sqlalchemy import create_engine

from mideng.core.answers import Done
from mideng.outbox.dead import SeenRow, requeue


def requeue_all(url: str, table: str, seen: list[tuple[str, int]], threads: int) -> list[str]:
    engine = create_engine(url, pool_size=threads)
    rows = [SeenRow(row_id, attempts) for row_id, attempts in seen]
    done: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def operator(n: int) -> None:
        barrier.wait()
        for row in rows if n % 2 == 0 else rows[::-1]:
            answer = requeue(engine, [row], table=table)[row.id]
            if isinstance(answer, Done):
                with lock:
                    done.append(row.id)

    pool = [threading.Thread(target=operator, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    engine.dispose()
    return done
