"""The lines of the outbox relay (mideng.outbox)."""

from __future__ import annotations

from mideng.observability.logs.fields import contained, fields, outbox_log


@contained
def relay_batch_failed(exc: BaseException) -> None:
    """The database or the broker is down: the relay waits, then tries again."""
    outbox_log.error(
        "outbox relay batch failed", exc_info=exc, extra=fields(outcome="relay_failed")
    )


@contained
def purge_failed(exc: BaseException) -> None:
    """Sent rows past their retention stay until the next purge."""
    outbox_log.error("outbox purge failed", exc_info=exc, extra=fields(outcome="purge_failed"))


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


@contained
def publisher_client_error(scheme: str, exc: BaseException) -> None:
    """An error a broker client reports on its own (a failed connect attempt among them), as
    one line: the client goes on, or a publish that needs it fails and says so."""
    outbox_log.warning(
        "%s publisher: %s: %s",
        scheme,
        type(exc).__name__,
        exc,
        extra=fields(outcome="broker_error"),
    )


@contained
def keys_left_leased(count: int) -> None:
    """Writers held some of a batch's keys until its lease ran out: those keys are published
    again only once the lease lapses (their sent rows stay sent)."""
    outbox_log.warning(
        "outbox relay: %d key(s) held by writers until the lease ended; they wait for it",
        count,
        extra=fields(outcome="keys_left_leased"),
    )


@contained
def listen_unavailable(exc: BaseException) -> None:
    """No LISTEN connection: the relay finds new rows by polling until it gets one."""
    outbox_log.warning(
        "outbox relay cannot LISTEN (%s); polling instead", exc, extra=fields(outcome="polling")
    )


@contained
def listen_lost(exc: BaseException) -> None:
    outbox_log.warning(
        "outbox relay lost its LISTEN connection: %s", exc, extra=fields(outcome="polling")
    )
