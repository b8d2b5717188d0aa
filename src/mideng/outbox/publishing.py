"""Publishing a claimed batch: each key's rows one after the other, keys side by side, every
publish within the key's lease.

A key stops at its first failure, and starts no publish in the last ``LAST_SHARE`` of its
lease; what is still unconfirmed when the lease ends is cancelled and counts as failed. A
failure is what the write-back records: the row's attempts, its error, whether it is dead,
and when to try it again (``Backoff``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from mideng.core.policy import doubled
from mideng.messaging.publish import Publisher
from mideng.outbox.ops import Failure, Row, message

#: The end of a key's lease, as a share of it, in which the key starts no publish: one that
#: starts later could still be on its way when another relay takes the key over.
LAST_SHARE = 0.2
#: A publisher the relay opens from a URL waits for its broker (to connect, for an answer) at
#: most this share of the lease (its ``timeout``), so a publish started before ``LAST_SHARE``
#: ends by the lease's end on its own, a connect and an answer included. The relay cancels
#: what is left at the lease's end too, but a client may not honour that: redis-py can swallow
#: a cancellation that comes just after it sent a command, and wait on for the answer.
BROKER_WAIT_SHARE = LAST_SHARE / 2


def _error_text(exc: Exception) -> str:
    """A failed publish's error as its row keeps it. Written back with the whole batch after
    it published: a text the database refuses (PostgreSQL stores no NUL, no column a lone
    surrogate) or a ``str()`` that raises failed that write-back, and every row the batch sent
    went out again once its keys' lease lapsed, batch after batch."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:
        text = type(exc).__name__
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True)
class Backoff:
    """Retry delay after a failed publish: ``first * 2**(attempt-1)``, at most ``cap``."""

    first: float = 1.0
    cap: float = 300.0

    def delay(self, attempt: int) -> float:
        return doubled(self.first, self.cap, attempt)


@dataclass(frozen=True)
class Publishing:
    """How a relay publishes: its publisher, its lease, and what a failure becomes."""

    publisher: Publisher
    lease: float
    max_attempts: int
    backoff: Backoff

    def failure(self, row: Row, exc: Exception) -> Failure:
        attempts = row.attempts + 1
        return Failure(
            row.id,
            row.key,
            attempts,
            _error_text(exc),
            attempts >= self.max_attempts,
            time.time() + self.backoff.delay(attempts),
        )

    async def batch(
        self, rows: Sequence[Row], until: float, gate: asyncio.Semaphore
    ) -> tuple[list[str], list[Failure]]:
        """Publish ``rows`` (leased until ``until``), at most ``gate`` keys at once; the ids
        sent and the failures."""
        groups: dict[str, list[Row]] = {}
        for row in rows:
            groups.setdefault(row.key if row.key is not None else "\0" + row.id, []).append(row)
        # Stop starting publishes for a key well before its lease ends, so a relay that takes
        # the key over never publishes beside this one.
        last_start = until - self.lease * LAST_SHARE
        sent: list[str] = []
        failures: list[Failure] = []

        async def publish_in_turn(group: list[Row], current: list[Row]) -> None:
            for row in group:
                if time.time() >= last_start:
                    return
                current[:] = [row]
                try:
                    await self.publisher.publish(message(row))
                except Exception as exc:  # the publisher's own timeouts included
                    failures.append(self.failure(row, exc))
                    return
                sent.append(row.id)  # no await before it: a cancellation can't split the two
                current.clear()

        async def one_key(group: list[Row]) -> None:
            async with gate:
                # A publish the broker never answers (a connection gone quiet) held its batch,
                # and a stopping relay, for good, and could still land after another relay
                # had taken the key over: the key's publishes end with its lease. One limit
                # for the key's rows, not one per publish (a task each, about a tenth of a
                # message's client time).
                current: list[Row] = []
                try:
                    await asyncio.wait_for(
                        publish_in_turn(group, current), max(until - time.time(), 0.0)
                    )
                except asyncio.TimeoutError:
                    if current:
                        unconfirmed = TimeoutError(
                            "the broker did not confirm before the lease ended"
                        )
                        failures.append(self.failure(current[0], unconfirmed))

        await asyncio.gather(*(one_key(group) for group in groups.values()))
        return sent, failures
