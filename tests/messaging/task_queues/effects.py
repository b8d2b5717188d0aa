"""The storm job's body, shared by every task queue's worker app: it notes each start, holds
one chosen job of one worker until the test kills that process, and counts its effect in a
Redis hash (HINCRBY, so a second run would show as 2).

Configured by the environment a test gives the worker: MIDENG_TQ_PREFIX (the Redis keys and the
Guard's scope, unique per test run), MIDENG_TQ_WORKER (this worker's name), MIDENG_TQ_HOLD_AT
(this worker holds its n-th job; 0: none).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from functools import cache
from typing import Any

from redis import Redis

from mideng import Guard, open_store
from tests.services import REDIS_URL

# The workers get the test process's: its jobs, decorated at import, and theirs share a scope.
PREFIX = os.environ.get("MIDENG_TQ_PREFIX") or f"mideng-tq-{uuid.uuid4().hex[:12]}"
SCOPE = f"tq-{PREFIX}"
WORKER = os.environ.get("MIDENG_TQ_WORKER", "?")
HOLD_AT = int(os.environ.get("MIDENG_TQ_HOLD_AT", "0"))
#: The run record's lease: a killed holder's key is taken over this soon after its death.
LEASE = 2.0
KEY = "storm:{key}"


@cache
def redis() -> Redis:
    return Redis.from_url(REDIS_URL)


_guards: dict[int, Guard] = {}


def guard() -> Guard:
    """One Guard per process, over Redis, opened after any fork."""
    if os.getpid() not in _guards:
        _guards[os.getpid()] = Guard(open_store(REDIS_URL), lease=LEASE)
    return _guards[os.getpid()]


def started(key: str) -> bool:
    """Note the start; True when this is the job this worker holds until it is killed."""
    r = redis()
    r.rpush(f"{PREFIX}:started", key)
    if HOLD_AT and r.incr(f"{PREFIX}:count:{WORKER}") == HOLD_AT:
        r.rpush(f"{PREFIX}:held", f"{os.getpid()} {key}")
        return True
    return False


def effect(key: str) -> str:
    redis().hincrby(f"{PREFIX}:effects", key, 1)
    return f"done:{key}"


def body(key: str) -> str:
    if started(key):
        time.sleep(60)  # the test SIGKILLs this process meanwhile
    return effect(key)


def flaky(key: str, fails: int, enqueue_again: Callable[[], Any]) -> str:
    """Fail the first ``fails`` tries; the try after them notes what an enqueue of its own key
    answers (the mark a retried job keeps: ``pending``) and counts its effect."""
    tries = redis().incr(f"{PREFIX}:tries:{key}")
    if tries <= fails:
        raise RuntimeError(f"try {tries} of {key} fails")
    redis().rpush(f"{PREFIX}:seen:{key}", enqueue_again().state.value)
    return effect(key)


def tries(key: str) -> int:
    return int(redis().get(f"{PREFIX}:tries:{key}") or 0)


def seen(key: str) -> list[str]:
    noted = redis().lrange(f"{PREFIX}:seen:{key}", 0, -1)
    return [s.decode() if isinstance(s, bytes) else s for s in noted]


def effects_of(key: str) -> int:
    return int(redis().hget(f"{PREFIX}:effects", key) or 0)
