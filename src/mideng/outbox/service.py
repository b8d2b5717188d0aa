"""A relay run as a service, as ``mideng relay`` and the Django app's ``mideng_relay`` run it:
until SIGTERM or SIGINT (the batches in flight finish, published and written back), or once
(everything committed, then what is left said in one line). Its failures come out as two
errors whose messages are one line: ``Refused`` (a URL or an option refused: a usage error)
and ``Stopped`` (it could not start, or the database or broker went away: exit 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from mideng.errors import IdempotencyError, named
from mideng.observability import logs
from mideng.outbox.ops import Left
from mideng.outbox.relay import Relay

#: Where the service's lines go (a command's stdout).
Say = Callable[[str], None]


class Refused(Exception):
    """How the relay was asked is wrong: a URL or an option was refused."""


class Stopped(Exception):
    """The relay could not start, or stopped: a database or broker failed."""


#: Seconds between a long-running relay's progress lines, by default.
PROGRESS_EVERY = 60.0


def serve(
    db_url: str,
    broker_url: str,
    *,
    once: bool,
    say: Say,
    progress: float = PROGRESS_EVERY,
    verbose: bool = False,
    **options: Any,
) -> int:
    """Run a relay (``options``: ``Relay``'s) until a signal, or ``once``; the exit code:
    ``once`` gives 1 when a row is left undelivered. A long-running relay logs its start, a
    progress line every ``progress`` seconds (0: none) and its stop, at INFO; ``verbose``
    adds a DEBUG line per batch (mideng.outbox's logger at DEBUG while it runs)."""
    if not progress >= 0:
        raise Refused(f"progress must be seconds >= 0: {progress}")
    try:
        worker = Relay(db_url, broker_url, **options)
    except IdempotencyError as exc:
        raise Refused(str(exc)) from exc
    level = logs.outbox_log.level
    if verbose:
        logs.outbox_log.setLevel(logging.DEBUG)
    try:
        return asyncio.run(_run(worker, once, say, progress, broker_label(broker_url)))
    except (Refused, Stopped):
        raise
    except IdempotencyError as exc:
        raise Stopped(str(exc)) from exc
    except Exception as exc:
        # ``once`` meeting a database or broker that went away mid-run: the same one line and
        # exit 1 as at start (a long-running relay logs such errors and goes on).
        raise Stopped(f"the relay stopped: {named(exc)}") from exc
    finally:
        logs.outbox_log.setLevel(level)  # a caller's own logging as it was (a test's, a shell's)


async def _started(worker: Relay) -> None:
    try:
        await worker.start()
    except BaseException as exc:
        # What start opened (the database's pool, a client half connected) is closed before
        # the error is reported, as ``async with`` would not: it never entered.
        with contextlib.suppress(Exception):
            await worker.close()
        if isinstance(exc, (ValueError, TypeError)):
            # A client refusing a part of its URL (an option it does not take).
            raise Refused(f"a URL was refused: {named(exc)}") from exc
        if isinstance(exc, Exception) and not isinstance(exc, IdempotencyError):
            raise Stopped(f"the relay could not start: {named(exc)}") from exc
        raise


async def _run(worker: Relay, once: bool, say: Say, progress: float, broker: str) -> int:
    await _started(worker)
    async with worker:
        if once:
            total = await worker.run_once()
            say(f"published {total.sent}, failed {total.failed}, dead {total.dead}")
            left = await worker.left()
            if left.due or left.waiting:
                say(left_line(left, time.time()))
            # Rows it could not publish, failing now or before (waiting for their retry), or
            # held by another relay, live or dead: not everything committed went out.
            return 0 if total.failed == 0 and not left.waiting else 1
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(signum, stop.set)
        logs.relay_started(worker.table, broker, worker.lease, worker.batch_keys, worker.depth)
        reporting = asyncio.create_task(_report(worker, progress, stop)) if progress else None
        try:
            await worker.run(stop)
        finally:
            if reporting is not None:
                reporting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reporting
        done = worker.done
        logs.relay_stopped(done.sent, done.failed, done.dead)
        return 0


async def _report(worker: Relay, every: float, stop: asyncio.Event) -> None:
    """A progress line every ``every`` seconds until ``stop``: what the relay did since the
    last one, and what waits. A look at what waits that fails is left out of that line: the
    relay logs the database's failure itself."""
    before, since = worker.done, time.monotonic()
    while not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
        if stop.is_set():
            return
        now, done = time.monotonic(), worker.done
        try:
            left = await worker.left()
        except Exception:  # the database is down: the batches' own lines say so
            left = Left()
        logs.relay_progress(
            done.sent - before.sent,
            done.failed - before.failed,
            done.dead - before.dead,
            now - since,
            left.due,
            left.waiting,
        )
        before, since = done, now


def broker_label(url: str) -> str:
    """A broker URL as a log line may show it: scheme, host and port, never a password."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def left_line(left: Left, now: float) -> str:
    """What ``once`` left pending, and why, as one line."""
    why = (
        (left.retrying, "waiting for a retry after a failed publish"),
        (
            left.leased,
            "leased to a relay (another one, or one stopped or killed, until the lease lapses)",
        ),
        (left.stuck, "below their key's mark (no relay publishes them again)"),
        (left.due, "due now (committed after the last claim)"),
    )
    line = "left pending: " + ", ".join(f"{count} {reason}" for count, reason in why if count)
    if left.next_at is not None:
        line += f"; the first due again in {max(left.next_at - now, 0.0):.1f} s"
    return line
