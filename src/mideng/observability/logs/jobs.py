"""The lines of scheduled jobs (mideng.jobs)."""

from __future__ import annotations

from collections.abc import Callable

from mideng.observability.logs.fields import Traced, contained, fields, jobs_log

#: A scheduler's loop for one job met an error it does not decide on (the store down): it
#: waits and reads the store's clock again.
loop_failed: Callable[[str, BaseException], None] = Traced(
    jobs_log.error, "job_loop_failed", "job %s: scheduler pass failed"
)


@contained
def slot(scope: str, key: str, outcome: str, fence: int | None, seconds: float | None) -> None:
    """One slot's outcome: INFO when it ran or was left alone, WARNING when the job failed,
    lost its claim, or found the slot UNKNOWN (an operator has to resolve it)."""
    warn = outcome in ("failed", "lost", "unknown")
    (jobs_log.warning if warn else jobs_log.info)(
        "mideng job slot %s %s: %s%s%s",
        scope,
        key,
        outcome,
        "" if fence is None else f" fence={fence}",
        "" if seconds is None else f" in {seconds:.3f}s",
        extra=fields(scope=scope, key=key, outcome=outcome),
    )
