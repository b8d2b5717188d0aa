"""The lines of the outbox relay (mideng.outbox)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from mideng.observability.logs.fields import (
    Line,
    Traced,
    contained,
    fields,
    outbox_log,
    with_error_type,
)

#: The database or the broker is down: the relay waits, then tries again.
relay_batch_failed: Callable[[BaseException], None] = Traced(
    outbox_log.error, "relay_failed", "outbox relay batch failed"
)

#: Sent rows past their retention stay until the next purge.
purge_failed: Callable[[BaseException], None] = Traced(
    outbox_log.error, "purge_failed", "outbox purge failed"
)


@contained
def publish_failed(row_id: str, key: str | None, attempts: int, dead: bool, error: str) -> None:
    """A row the broker did not take: retried after its backoff, or dead once out of attempts."""
    outbox_log.warning(
        "outbox publish failed id=%s key=%s attempt=%d%s: %s",
        row_id,
        key,
        attempts,
        " (dead)" if dead else "",
        error,
        extra=fields(key=key, outcome="dead_letter" if dead else "publish_failed"),
    )


#: An error a broker client reports on its own (a failed connect attempt among them), as one
#: line: the client goes on, or a publish that needs it fails and says so.
publisher_client_error: Callable[[str, BaseException], None] = Line(
    outbox_log.warning, "broker_error", "%s publisher: %s: %s", fill=with_error_type
)

#: Writers held some of a batch's keys until its lease ran out: those keys are published again
#: only once the lease lapses (their sent rows stay sent).
keys_left_leased: Callable[[int], None] = Line(
    outbox_log.warning,
    "keys_left_leased",
    "outbox relay: %d key(s) held by writers until the lease ended; they wait for it",
)

#: The claims a take-over line names at most.
HOLDERS_SHOWN = 3


@contained
def relay_took_over(keys: int, rows: int, holders: Sequence[str]) -> None:
    """A claim took keys (or unkeyed rows) another claim still held past its lease: the relay
    that made it died or stalled. ``holders``: those claims' tokens."""
    what = " and ".join(
        f"{n} {noun}{'' if n == 1 else 's'}"
        for n, noun in ((keys, "key"), (rows, "unkeyed row"))
        if n
    )
    distinct = sorted(set(holders))
    shown = ", ".join(distinct[:HOLDERS_SHOWN])
    more = len(distinct) - HOLDERS_SHOWN
    outbox_log.warning(
        "outbox relay took over %s from a relay whose lease lapsed (its claim %s%s)",
        what,
        shown,
        f" and {more} more" if more > 0 else "",
        extra=fields(outcome="taken_over"),
    )


@contained
def relay_batch(
    claimed: int, keys: int, published: int, failed: int, written: int, began: float
) -> None:
    """One batch, at DEBUG (``mideng relay -v``): nothing is formatted unless that is on.
    ``written``: of its ``keys``, those its write-back settled (the others a writer held);
    ``began``: its claim's ``time.time()``."""
    if not outbox_log.isEnabledFor(logging.DEBUG):
        return
    outbox_log.debug(
        "outbox relay batch: %d rows claimed, %d published, %d failed; %d of %d keys written "
        "back; %.1f ms",
        claimed,
        published,
        failed,
        written,
        keys,
        (time.time() - began) * 1000,
        extra=fields(outcome="batch"),
    )


#: No LISTEN connection: the relay finds new rows by polling until it gets one.
listen_unavailable: Callable[[BaseException], None] = Line(
    outbox_log.warning, "polling", "outbox relay cannot LISTEN (%s); polling instead"
)

listen_lost: Callable[[BaseException], None] = Line(
    outbox_log.warning, "polling", "outbox relay lost its LISTEN connection: %s"
)


#: A long-running relay began: what it publishes, where, and how.
relay_started: Callable[[str, str, float, int, int], None] = Line(
    outbox_log.info,
    "relay_started",
    "outbox relay started: table=%s broker=%s lease=%gs, %d keys a batch, %d batches in flight",
)

#: Every ``progress`` seconds while it runs: what it did since the last line, what is due.
relay_progress: Callable[[int, int, int, float, int, int], None] = Line(
    outbox_log.info,
    "relay_progress",
    "outbox relay: %d published, %d failed, %d dead in the last %.0f s; %d due now, "
    "%d waiting (a retry or another relay's lease)",
)

#: It stopped (a signal): what it did since it started.
relay_stopped: Callable[[int, int, int], None] = Line(
    outbox_log.info,
    "relay_stopped",
    "outbox relay stopped: %d published, %d failed, %d dead since it started",
)
