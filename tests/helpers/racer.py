"""One racing process: T threads each run every key once, in their own shuffled order.

Every body run appends "key run-id" to a shared file (O_APPEND, one write per line), so the
parent counts real executions across all processes; every call's answer is returned too, so
the parent can check that all callers of a key saw the one run's result.
"""

from __future__ import annotations

import os
import random
import threading
import uuid
from typing import Any

from mideng import Guard, open_store


def race(
    url: str,
    options: dict[str, Any],
    scope: str,
    keys: list[str],
    threads: int,
    runs_file: str,
    size: int = 0,
) -> dict[str, list[str]]:
    """``size``: each run's answer is its run id padded with '.' to that many characters."""
    store = open_store(url, **options)
    guard = Guard(store, lease=30, in_progress="wait", wait_timeout=120)
    fd = os.open(runs_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    seen: dict[str, list[str]] = {k: [] for k in keys}
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def body(key: str) -> str:
        run_id = uuid.uuid4().hex
        os.write(fd, f"{key} {run_id}\n".encode())
        return run_id.ljust(size, ".")

    def worker(seed: int) -> None:
        order = list(keys)
        random.Random(seed).shuffle(order)
        barrier.wait()
        for key in order:
            answer = guard.run(scope, key, body, key)
            with lock:
                seen[key].append(answer)

    pool = [threading.Thread(target=worker, args=(os.getpid() * 100 + i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    os.close(fd)
    store.close()
    return seen
