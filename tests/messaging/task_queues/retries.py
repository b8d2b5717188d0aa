"""The retry check every queue runs in-process: a job whose first try fails keeps its key's
mark while the queue will try it again (an enqueue from its retry answers PENDING, and sends
nothing), then frees it when it succeeds (a later enqueue answers DONE); a job whose every try
fails frees the mark after its last (a later enqueue sends it again)."""

from __future__ import annotations

from collections.abc import Callable

from mideng.messaging.task_queue import Enqueue, Enqueued
from tests.brokers import token
from tests.messaging.task_queues import effects


def check_retries(
    enqueue: Callable[[str, int], Enqueued], work: Callable[[], None], tries_for_good: int
) -> None:
    """``enqueue(key, fails)``; ``work()`` runs the queue until it is idle; a job failing every
    try is tried ``tries_for_good`` times."""
    healed, doomed = f"healed-{token()}", f"doomed-{token()}"
    try:
        _check(enqueue, work, tries_for_good, healed, doomed)
    finally:
        prefix, r = effects.PREFIX, effects.redis()
        r.delete(
            *(f"{prefix}:{what}:{key}" for what in ("tries", "seen") for key in (healed, doomed))
        )
        r.hdel(f"{prefix}:effects", healed, doomed)


def _check(
    enqueue: Callable[[str, int], Enqueued],
    work: Callable[[], None],
    tries_for_good: int,
    healed: str,
    doomed: str,
) -> None:
    assert enqueue(healed, 1).state is Enqueue.QUEUED
    assert enqueue(doomed, 99).state is Enqueue.QUEUED
    work()
    assert effects.tries(healed) == 2
    assert effects.seen(healed) == ["pending"]  # kept across the retry: nothing sent
    assert effects.effects_of(healed) == 1
    assert enqueue(healed, 1).state is Enqueue.DONE
    assert effects.tries(doomed) == tries_for_good
    assert effects.effects_of(doomed) == 0
    assert enqueue(doomed, 99).state is Enqueue.QUEUED  # freed after its last try
