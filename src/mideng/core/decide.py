"""The claim decision and the fenced transitions, as pure functions of (record, request, now).

Memory and SQLite stores call these inside their lock / transaction. The Redis script and the
SQL statements are translations of the same rules; the contract suite holds them all to it.
"""

from __future__ import annotations

from mideng.core.record import (
    ACQUIRED,
    FAILED,
    GOES_UNKNOWN,
    IN_PROGRESS,
    MISMATCH,
    PROCESSING,
    REPLAY,
    SUCCEEDED,
    UNRESOLVED,
    Claim,
    ClaimRequest,
    Outcome,
    Record,
    Resolution,
    Status,
    Ticket,
)


def fresh(req: ClaimRequest, now: float, previous: Record | None) -> Record:
    """The record written by an ACQUIRED claim."""
    lease, ttl = req.lease, req.ttl
    # A processing record must outlive its lease, or a crashed holder's key would vanish and a
    # retry would run again. Under the UNKNOWN policy it must never vanish by itself: only
    # resolve() may end it, or a double charge would slip through after the ttl.
    expires = None if req.on_expiry is GOES_UNKNOWN or ttl is None else now + lease + ttl
    if previous is None:
        fence = attempts = 1
        created = now
    else:
        fence, attempts = previous.fence + 1, previous.attempts + 1
        created = previous.created_at
    return Record(
        req.scope,
        req.key,
        PROCESSING,
        fence,
        req.owner,
        req.fingerprint,
        now + lease,
        None,
        None,
        None,
        attempts,
        req.request_id,
        created,
        now,
        expires,
    )


def decide(current: Record | None, req: ClaimRequest, now: float) -> tuple[Claim, bool]:
    """Decide a claim. Returns the claim and whether ``claim.record`` must be written."""
    if current is None or (current.expires_at is not None and current.expires_at <= now):
        # An expired record keeps counting fences so an old ticket can never match again.
        return Claim(ACQUIRED, fresh(req, now, current)), True

    status = current.status
    # The record stands unless a branch below returns a write. Compared by identity, not
    # looked up in a dict (an enum member's hash is a Python-level call); a succeeded record,
    # every duplicate's, is asked about first.
    if status is SUCCEEDED:
        standing = REPLAY
    elif status is PROCESSING:
        if current.lease_until is None or current.lease_until <= now:  # its lease ran out
            if req.on_expiry is GOES_UNKNOWN:
                unknown = current.with_(
                    status=Status.UNKNOWN, lease_until=None, updated_at=now, expires_at=None
                )
                return Claim(_or_mismatch(UNRESOLVED, unknown, req), unknown), True
            return Claim(ACQUIRED, fresh(req, now, current)), True
        standing = IN_PROGRESS
    elif status is FAILED:
        if current.error is None or current.attempts < req.max_attempts:
            return Claim(ACQUIRED, fresh(req, now, current)), True
        standing = REPLAY
    else:
        standing = UNRESOLVED
    return Claim(_or_mismatch(standing, current, req), current), False


def _or_mismatch(outcome: Outcome, record: Record, req: ClaimRequest) -> Outcome:
    if (
        req.fingerprint is not None
        and record.fingerprint is not None
        and req.fingerprint != record.fingerprint
    ):
        return MISMATCH
    return outcome


def holds(current: Record | None, ticket: Ticket, now: float) -> bool:
    """True while ``ticket`` is the live claim: same owner and fence, still processing.

    A holder whose lease ran out but whom nobody has taken over yet may still finish: the
    record is unchanged, so its completion is the truth.
    """
    return (
        current is not None
        and (current.expires_at is None or current.expires_at > now)
        and current.status is PROCESSING
        and current.owner == ticket.owner
        and current.fence == ticket.fence
    )


def finished(
    current: Record,
    now: float,
    *,
    status: Status,
    result: bytes | None = None,
    codec: str | None = None,
    error: bytes | None = None,
    ttl: float | None,
) -> Record:
    """The record as a claim ends: no lease, retained for ttl from now (None: forever)."""
    return _ended(current, now, status, result, codec, error, ttl)


def _ended(
    c: Record,
    now: float,
    status: Status,
    result: bytes | None,
    codec: str | None,
    error: bytes | None,
    ttl: float | None,
) -> Record:
    return Record(
        c.scope,
        c.key,
        status,
        c.fence,
        c.owner,
        c.fingerprint,
        None,
        result,
        codec,
        error,
        c.attempts,
        c.request_id,
        c.created_at,
        now,
        None if ttl is None else now + ttl,
    )


def completed(
    current: Record, now: float, *, result: bytes, codec: str, ttl: float | None
) -> Record:
    return _ended(current, now, SUCCEEDED, result, codec, None, ttl)


def failed(current: Record, now: float, *, error: bytes, ttl: float | None) -> Record:
    return finished(current, now, status=Status.FAILED, error=error, ttl=ttl)


def renewed(current: Record, now: float, lease: float, ttl: float | None) -> Record:
    # A record that was never meant to expire (UNKNOWN policy, ttl=None) stays that way.
    expires_at = None if current.expires_at is None or ttl is None else now + lease + ttl
    return current.with_(lease_until=now + lease, updated_at=now, expires_at=expires_at)


def settled(current: Record, now: float, how: Resolution) -> Record:
    """Resolve an UNKNOWN (or stuck) record after asking the provider what happened.

    "It did not happen" is a failure without an error: the next claim may run again.
    """
    if how.failed:
        return finished(current, now, status=Status.FAILED, ttl=how.ttl)
    return finished(
        current, now, status=Status.SUCCEEDED, result=how.result, codec=how.codec, ttl=how.ttl
    )
