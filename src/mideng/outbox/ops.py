"""Every outbox operation as a statement generator (mideng.db): the writer's ``add``, the
relay's ``claim``, ``settle`` and the purge. They run on the caller's connection (``add``) or
the relay's own, sync or async, unchanged.

On MySQL/MariaDB each of the relay's transactions that holds key rows takes its locks first
and only then changes anything, each change by primary key among the rows it locked
(mideng.outbox.statements), so none of its changes waits for a writer while it holds a key
row the writer may want. The locks are taken with ``FOR UPDATE SKIP LOCKED``, or on MariaDB
(``Queries.nowait``) with ``NOWAIT`` by key (``_lock_free``): MariaDB's SKIP LOCKED queues
for a held row for an instant before it skips it, long enough for a deadlock search to see
the relay waiting for a writer that waits for it (docs/outbox.md, deadlocks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from mideng.db.dialect import lock_timed_out
from mideng.db.statements import Op, Stmt
from mideng.errors import StoreUnavailableError
from mideng.messaging.publish import Outgoing
from mideng.observability import logs
from mideng.outbox.statements import WHY_LEFT, Queries

#: Locking reads a ``NOWAIT`` lock of a list may see fail before it leaves the keys it has
#: not tried yet for next time: each failure is a round trip (``_lock_free``).
LOCK_MISSES = 8

#: Ids one statement names at most. A batch holds up to ``batch_rows`` rows of each kind,
#: more binds than a statement takes on SQLite before 3.32 (999) once over a thousand, or on
#: MySQL (65,535): one list for all of them failed the batch's write-back every time.
LIST_MAX = 500


class Row(NamedTuple):
    """A row the relay is about to publish; ``headers`` as stored (JSON text)."""

    id: str
    key: str | None
    seq: int | None
    destination: str
    payload: bytes
    headers: str
    attempts: int


class Failure(NamedTuple):
    """A row whose publish failed: what to write back."""

    id: str
    key: str | None
    attempts: int
    error: str
    dead: bool
    retry_at: float


def _row(values: Sequence[Any]) -> Row:
    # Nothing here may fail on what a row holds: a claim that raised on one row would fail
    # every batch that met it, and the keys leased beside it would be claimed with it again
    # and again, never published. The headers are read when the row is published (``message``).
    payload = values[4]
    if isinstance(payload, str):  # SQLite keeps a text value written to a BLOB column as text
        payload = payload.encode("utf-8", "surrogatepass")
    return Row(
        str(values[0]),
        values[1],
        None if values[2] is None else int(values[2]),
        str(values[3]),
        bytes(payload) if not isinstance(payload, bytes) else payload,
        str(values[5]),
        int(values[6]),
    )


def message(row: Row) -> Outgoing:
    """What publishing ``row`` sends. Headers that are not a JSON object of strings (a row
    written by something other than ``add``) fail this row's publish, counted and in the end
    dead like any other failure, with its key waiting behind it."""
    try:
        headers = json.loads(row.headers)
    except ValueError:
        headers = None
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise ValueError(f"the row's headers are not a JSON object of strings: {row.headers:.200}")
    return Outgoing(row.destination, row.payload, row.id, row.key, headers)


def add(q: Queries, values: Mapping[str, Any]) -> Op[None]:
    """One row, in the caller's transaction. A keyed row first bumps its key's sequence: the
    key row's lock, held until the caller commits, is what puts a key's rows in commit order."""
    if values["key"] is None:
        yield Stmt(q.insert_unkeyed, values)
        return
    yield Stmt(q.bump_key, {"key": values["key"]})
    res = yield Stmt(q.insert_keyed, values)
    if res.rowcount != 1:
        # Only a key row deleted under the writer's lock could do this: never in a sane run.
        raise StoreUnavailableError(f"outbox key row for {values['key']!r} vanished mid-add")


def _ids(ids: Sequence[str]) -> dict[str, Any]:
    return {f"i{n}": value for n, value in enumerate(ids)}


def _by_list(q: Queries, name: str, ids: Sequence[str], params: dict[str, Any]) -> Op[None]:
    """``name`` for every id, ``LIST_MAX`` ids a statement."""
    for start in range(0, len(ids), LIST_MAX):
        part = ids[start : start + LIST_MAX]
        yield Stmt(q.in_list(name, len(part)), {**params, **_ids(part)})


def claim(
    q: Queries, token: str, now: float, until: float, keys: int, rows: int
) -> Op[tuple[list[Row], list[str]]]:
    """Lease up to ``keys`` keys that have unsent rows and up to ``rows`` unkeyed rows to
    ``token``, and read what they hold, a key's rows in sequence order; the rows and the keys
    leased. Keys and rows another token still held (its lease lapsed: that relay died or
    stalled) are logged as taken over, from what the claim's statements return anyway."""
    lease = {"token": token, "until": until, "now": now, "limit": keys}
    if q.mysql:
        # Both locking reads before either update (module docstring); the unkeyed rows
        # first, while no key row a writer may wait for is held yet.
        found = yield Stmt(q.select_rows, {**lease, "limit": rows})
        unkeyed = [_row(values) for values in found.rows]
        rows_held = [values[-1] for values in found.rows]
        if q.nowait:
            # More keys read than leased: some of those due are a writer's at the moment.
            due = yield Stmt(q.due_keys, {**lease, "limit": keys * 4})
            found_keys = [row[0] for row in due.rows]
            names = yield from _lock_free(q, "lock_due", found_keys, {"now": now}, keys, keys)
            # Their holders as the read before the lock saw them: a key still due when it was
            # locked was claimed by nobody since.
            before: dict[str, str | None] = {row[0]: row[1] for row in due.rows}
            keys_held = [before.get(name) for name in names]
        else:
            found = yield Stmt(q.select_keys, lease)
            names = [row[0] for row in found.rows]
            keys_held = [row[1] for row in found.rows]
        if names:
            params = {"token": token, "until": until, **_ids(names)}
            yield Stmt(q.in_list("claim_keys", len(names)), params)
        if unkeyed:
            lease_rows = {"token": token, "until": until}
            yield from _by_list(q, "claim_rows", [row.id for row in unkeyed], lease_rows)
    else:
        leased = yield Stmt(q.claim_keys, lease)
        names = [row[0] for row in leased.rows]
        keys_held = [row[1] for row in leased.rows]
        found = yield Stmt(q.claim_rows, {**lease, "limit": rows})
        unkeyed = [_row(values) for values in found.rows]
        rows_held = [values[-1] for values in found.rows]
    keyed = yield Stmt(q.read_keyed, {"token": token, "limit": rows})
    lapsed_keys = [holder for holder in keys_held if holder is not None]
    lapsed_rows = [holder for holder in rows_held if holder is not None]
    if lapsed_keys or lapsed_rows:
        logs.relay_took_over(len(lapsed_keys), len(lapsed_rows), lapsed_keys + lapsed_rows)
    return [_row(values) for values in keyed.rows] + unkeyed, names


def settle(
    q: Queries,
    token: str,
    now: float,
    sent: Sequence[str],
    failures: Sequence[Failure],
    keys: Sequence[str],
) -> Op[list[str]]:
    """Write back one batch: the batch's ``keys`` no writer holds locked, rows sent, failures
    counted (dead after the last attempt), then those keys settled (``settle_keys``); the keys
    a writer held, still to do. Like the keys, each row is written only while ``token`` still
    holds it (its key's lease, or an unkeyed row's own): a batch that outlived its lease
    changes nothing another relay has published or counted since."""
    locked = yield from _lock_keys(q, token, keys)
    if sent and q.kind == "postgresql":
        yield Stmt(q.sent_array, {"token": token, "now": now, "ids": list(sent)})
    elif sent:
        yield from _by_list(q, "sent", sent, {"token": token, "now": now})
    for failure in failures:
        yield Stmt(
            q.failed,
            {
                "token": token,
                "id": failure.id,
                "attempts": failure.attempts,
                "error": failure.error[:2000],
                "state": 2 if failure.dead else 0,
                "retry_at": None if failure.key is not None else failure.retry_at,
            },
        )
    return (yield from _settle_locked(q, token, keys, failures, locked))


def settle_keys(
    q: Queries, token: str, keys: Sequence[str], failures: Sequence[Failure]
) -> Op[list[str]]:
    """Each key's mark moved past what finished, then the keys let go: a failed key only at
    its retry time, the rest at once. Key updates are fenced by ``token``: a relay whose lease
    lapsed changes no key another relay holds now.

    Only the key rows no writer holds are changed (``Queries.lock_keys`` skips the others), so
    a writer that holds one of the batch's keys and waits for another never waits in a cycle
    with the write-back. The keys skipped, still leased to ``token``, are returned: the relay
    settles them in a transaction of their own once the writer is done."""
    locked = yield from _lock_keys(q, token, keys)
    return (yield from _settle_locked(q, token, keys, failures, locked))


def _lock_keys(q: Queries, token: str, keys: Sequence[str]) -> Op[list[str] | None]:
    """The batch's key rows still leased to ``token`` that no writer holds, now locked; None
    on SQLite, which has no row locks (nothing to skip)."""
    if q.lock_keys is None:
        return None
    if not q.mysql:
        found = yield Stmt(q.lock_keys, {"token": token})
    elif q.nowait:
        locked = yield from _lock_free(q, "lock_keys", list(keys), {"token": token})
        return sorted(locked)
    elif keys:
        found = yield Stmt(q.in_list("lock_keys", len(keys)), {"token": token, **_ids(keys)})
    else:
        return []
    return sorted(row[0] for row in found.rows)


def _lock_free(
    q: Queries,
    name: str,
    keys: list[str],
    params: dict[str, Any],
    limit: int | None = None,
    size: int = 500,
) -> Op[list[str]]:
    """Of ``keys`` (up to ``limit`` of them), those the ``name`` read (``FOR UPDATE NOWAIT``,
    ``size`` keys a statement) finds, now locked, without ever queueing for a lock. A read
    that meets a row locked elsewhere fails at once (the rows it locked before it stay locked
    until this transaction ends, unused); its keys are tried again in halves, down to the
    held one, which is left out. After ``LOCK_MISSES`` such failures the keys not yet tried
    are left out too: this transaction is not theirs, the next one may be."""
    limit = len(keys) if limit is None else limit
    todo = [keys[start : start + size] for start in range(0, len(keys), size)][::-1]
    locked: list[str] = []
    misses = 0
    while todo and len(locked) < limit and misses < LOCK_MISSES:
        part = todo.pop()[: limit - len(locked)]
        try:
            found = yield Stmt(q.in_list(name, len(part)), {**params, **_ids(part)})
        except Exception as exc:
            if not lock_timed_out(getattr(exc, "orig", exc)):
                raise
            misses += 1
            if len(part) > 1:
                todo += [part[len(part) // 2 :], part[: len(part) // 2]]
            continue
        locked += [row[0] for row in found.rows]
    return locked


def _settle_locked(
    q: Queries,
    token: str,
    keys: Sequence[str],
    failures: Sequence[Failure],
    locked: list[str] | None,
) -> Op[list[str]]:
    fenced: dict[str, Any] = {"token": token}
    ready: list[str] | None = None  # None: the token alone names the rows to change
    everything = True
    if locked is not None:
        everything = set(locked).issuperset(keys)
        # PostgreSQL locks only the rows an UPDATE's whole condition picks, all of them
        # locked here already when ``everything``. InnoDB's scan for ``claimed_by`` (a whole
        # small table, or the index) would lock its way through rows a writer holds, and wait
        # there: on MySQL/MariaDB the rows go by primary key.
        if q.mysql or not everything:
            ready = locked
    if ready is None:
        yield Stmt(q.advance, fenced)
        yield from _back_off(q, token, failures, None)
        yield Stmt(q.release, fenced)
        return []
    if ready:
        yield Stmt(q.in_list("advance", len(ready)), _ids(ready))
        waiting = yield from _back_off(q, token, failures, set(ready))
        # Not the keys just backed off: letting them go here would clear their retry time.
        free = [key for key in ready if key not in waiting]
        if free:
            yield Stmt(q.in_list("release", len(free)), _ids(free))
    if everything:
        return []
    # What is still leased to this batch and was not ready: a writer holds it (a key leased
    # to another relay after this lease lapsed is not ours to settle).
    left = yield Stmt(q.still_claimed, fenced)
    return [row[0] for row in left.rows]


def _back_off(
    q: Queries, token: str, failures: Sequence[Failure], ready: set[str] | None
) -> Op[set[str]]:
    """A key whose publish failed waits for its retry time (``ready``: the keys locked); the
    keys it was done for."""
    waiting = set()
    for failure in failures:
        key = failure.key
        if key is not None and not failure.dead and (ready is None or key in ready):
            yield Stmt(q.back_off, {"key": key, "token": token, "retry_at": failure.retry_at})
            waiting.add(key)
    return waiting


def purge_rows(q: Queries, cutoff: float) -> Op[int]:
    """Delete rows sent before ``cutoff``; how many."""
    res = yield Stmt(q.purge_rows, {"cutoff": cutoff})
    return res.rowcount


def purge_keys(q: Queries) -> Op[None]:
    """Delete the key rows nothing refers to any more (rows purged in a transaction before):
    the idle ones no writer holds are locked first, then deleted by key."""
    if q.lock_idle_keys is None:
        yield Stmt(q.purge_keys, {})
        return
    if q.nowait:
        idle = yield Stmt(q.idle_keys, {})
        names = yield from _lock_free(q, "lock_idle", [row[0] for row in idle.rows], {})
    else:
        found = yield Stmt(q.lock_idle_keys, {})
        names = [row[0] for row in found.rows]
    if q.mysql:
        for name in names:
            yield Stmt(q.purge_key, {"key": name})
        return
    yield from _by_list(q, "purge_keys", names, {})


class Left(NamedTuple):
    """The rows still pending, by why: ``due`` now (committed after the last claim, or their
    key held by its writer then), ``retrying`` (waiting for their retry time after a failed
    publish), ``leased`` (their key, or the row, leased to a relay: another one, or one that
    stopped or died, until the lease lapses), ``stuck`` (below their key's mark: no relay
    publishes them again). ``next_at``: when the first retrying or leased one is due again."""

    due: int = 0
    retrying: int = 0
    leased: int = 0
    stuck: int = 0
    next_at: float | None = None

    @property
    def waiting(self) -> int:
        """Rows a relay could not publish now."""
        return self.retrying + self.leased + self.stuck


def left_pending(q: Queries, now: float) -> Op[Left]:
    """The rows still pending at ``now``, and why (``Left``)."""
    res = yield Stmt(q.left, {"now": now})
    counts = {WHY_LEFT[int(why)]: (int(n), until) for why, n, until in res.rows}
    ends = [until for why, (_, until) in counts.items() if why in ("retrying", "leased")]
    return Left(
        **{why: n for why, (n, _) in counts.items()},
        next_at=min(float(until) for until in ends) if ends else None,
    )


def counts(q: Queries) -> Op[dict[int, int]]:
    """Rows per state (pending, sent, dead)."""
    res = yield Stmt(q.count, {})
    return {int(state): int(n) for state, n in res.rows}
