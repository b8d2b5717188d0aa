"""One process of operators acting at once: T threads each try to resolve every key, as seen.

Each ``Done`` answer is returned as ``key fence``, so the parent counts, across processes,
how many actions each record took.
"""

from __future__ import annotations

import random
from typing import Any

from mideng import Guard, open_store
from mideng.core.answers import Done
from mideng.core.record import Seen, Status
from mideng.guard.operator import resolve_record
from tests.helpers.together import together


def resolve_all(
    url: str, options: dict[str, Any], scope: str, seen: dict[str, int], threads: int
) -> list[str]:
    store = open_store(url, **options)
    guard = Guard(store)

    def operator(seed: int) -> list[str]:
        keys = list(seen)
        random.Random(seed).shuffle(keys)
        done = []
        for key in keys:
            answer = resolve_record(
                guard, scope, key, Seen(Status.UNKNOWN, seen[key]), result={"by": seed}
            )
            if isinstance(answer, Done):
                done.append(f"{key} {answer.now.fence}")
        return done

    try:
        return together(threads, operator)
    finally:
        store.close()
