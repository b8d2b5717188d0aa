"""Every record-table operation, written once as a generator of statements (mideng.db).

An operation yields ``Stmt`` and receives ``Res``; mideng.db.drive runs it. The SQL store
drives these over its own pooled DB-API connections (sync and async), the SQLite store over its
sqlite3 connections, the transactional mode over the caller's SQLAlchemy connection
(mideng.db.caller_connection, sync and async): one copy of the logic.

The claim rules are core.decide's own functions, applied to the row the database returned and
the database's clock; a write happens only when they say so, as an insert that yields to a
concurrent one or a compare-and-set on the row as read. Losing such a race means someone else
made progress, so the operation reads again.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Generic, TypeVar

from mideng.core import decide as rules
from mideng.core.audit import AuditEntry, AuditQuery, AuditRow
from mideng.core.record import (
    ACQUIRED,
    GOES_UNKNOWN,
    Claim,
    ClaimRequest,
    Outcome,
    Record,
    Resolution,
    Ticket,
)
from mideng.db.statements import Op, Res, Sql, Stmt
from mideng.errors import StoreUnavailableError
from mideng.schema import audit
from mideng.stores.audit import RELEASED, record_state
from mideng.stores.base import HIT_PREFIX, TOKEN_PREFIX, check_resolvable, lease_lost
from mideng.stores.batch import Completion
from mideng.stores.record_table.rows import cas_params
from mideng.stores.record_table.schema import REQUEST_ID_MAX
from mideng.stores.record_table.statements import Statements

# Each lost race means another caller changed the row in between, so a handful of rounds
# always settles; running out points at something odd (a clock jumping back, say).
RACES = 32
PURGE_BATCH = 1000
#: Below any expiry: a purge's first batch begins here.
EARLIEST = -1.0e300

P = TypeVar("P")


def _params(s: Statements, **values: Any) -> dict[str, Any]:
    if s.python_clock:
        values["now"] = time.time()
    return values


def _clip(request_id: str | None) -> str | None:
    return None if request_id is None else request_id[:REQUEST_ID_MAX]


def read(s: Statements, scope: str, key: str) -> Op[tuple[Record | None, float]]:
    """The record (None if absent) and the database clock (0 when absent: nothing to judge)."""
    params: dict[str, Any] = {"scope": scope, "key": key}
    if s.python_clock:
        params["now"] = time.time()
    res = yield Stmt(s.select, params)
    if not res.rows:
        return None, 0.0
    return s.current(res.rows[0], scope, key)


def _as_read(record: Record) -> dict[str, Any]:
    """The binds that name ``record``'s row only while it is still as read (``cas_delete``)."""
    binds = cas_params(record, record, None)
    return {name: binds[name] for name in ("scope", "key", *WAS)}


WAS = ("was_fence", "was_owner", "was_status", "was_updated_at")


def _cas(s: Statements, old: Record, new: Record) -> Stmt:
    params = cas_params(old, new, _clip(new.request_id))
    if s.python_clock:
        params["now"] = time.time()
    return Stmt(s.cas, params)


def claim_params(s: Statements, req: ClaimRequest) -> dict[str, Any]:
    """The binds of a claim's insert (one dict literal: every first call builds it)."""
    params = {
        "scope": req.scope,
        "key": req.key,
        "owner": req.owner,
        "fingerprint": req.fingerprint,
        "lease": float(req.lease),
        "expiry_ttl": None if req.on_expiry is GOES_UNKNOWN else req.ttl,
        "request_id": req.request_id,
    }
    if s.python_clock:
        params["now"] = time.time()
    return params


UNREAD: Any = object()


def clipped(req: ClaimRequest) -> ClaimRequest:
    """The request with its request id cut to the column, as it is stored and answered."""
    if req.request_id is not None and len(req.request_id) > REQUEST_ID_MAX:
        return dataclasses.replace(req, request_id=_clip(req.request_id))
    return req


def insert(s: Statements, req: ClaimRequest) -> Stmt:
    """The insert of a fresh claim row (``req`` clipped); ``inserted`` reads its answer."""
    assert s.insert is not None
    return Stmt(s.insert, claim_params(s, req))


def inserted(s: Statements, req: ClaimRequest, stmt: Stmt, res: Res) -> Claim | None:
    """The claim an ``insert`` made, or None when it found the key taken."""
    stamped = s.stamped(res, stmt.params or {})
    return None if stamped is None else Claim(ACQUIRED, rules.fresh(req, stamped, None))


def standing(req: ClaimRequest, found: tuple[Record, float] | None) -> Claim | None:
    """What a read answers by itself (a replay, a refusal); None when the claim must write."""
    if found is None:
        return None
    decision, write = rules.decide(found[0], req, found[1])
    return None if write else decision


def claim(
    s: Statements, req: ClaimRequest, first: tuple[Record, float] | None = UNREAD
) -> Op[Claim]:
    """A claim that reads first. ``first``: that read, when the caller already made it (the
    record and clock, or None for no row). Inserting first (see claims.ClaimOrder) is
    ``insert`` sent by the store itself; a key it finds taken comes here."""
    req = clipped(req)
    current: Record | None
    for _ in range(RACES):
        if s.look_first:
            # A plain read decides replays and refusals without a lock; a snapshot older than
            # the row only sends us on to the locking insert below, which sees the row as is.
            seen, now = yield from read(s, req.scope, req.key)
            if seen is not None:
                decision, write = rules.decide(seen, req, now)
                if not write:
                    return decision
        if s.claim is not None:  # insert-or-lock, then the row as it stands
            res = Res(0, ())
            params = claim_params(s, req)
            for sql in s.claim:
                res = yield Stmt(sql, params)
            current, now = s.current(res.rows[0], req.scope, req.key)
            if current.owner == req.owner:  # owners are minted per call: our insert
                return Claim(Outcome.ACQUIRED, current)
        else:
            if first is UNREAD:
                current, now = yield from read(s, req.scope, req.key)
            else:
                current, now = first if first is not None else (None, 0.0)
                first = UNREAD
            if current is None:
                fresh = insert(s, req)  # its parameters built only when it is sent
                made = inserted(s, req, fresh, (yield fresh))
                if made is not None:
                    return made
                continue  # inserted by someone else since the read
        decision, write = rules.decide(current, req, now)
        if not write:
            return decision
        done = yield _cas(s, current, decision.record)
        if done.rowcount == 1:
            return decision
    raise StoreUnavailableError(f"claim on {req.scope}:{req.key} kept losing races")


def _fenced(
    s: Statements,
    ticket: Ticket,
    sql: Sql,
    params: dict[str, Any],
    known: Record | None,
    change: Callable[[Record, float], Record],
) -> Op[Record]:
    """Run a fenced update (``params``: ``fenced_params``); ``known`` is the claim's own row,
    from which the new one follows by ``change`` at the clock the update stamped."""
    res = yield Stmt(sql, params)
    if (
        res.rowcount == 1
        and known is not None
        and (known.owner, known.fence) == (ticket.owner, ticket.fence)
    ):
        return change(known, fenced_stamp(s, res, params))
    current, _ = yield from read(s, ticket.scope, ticket.key)
    if res.rowcount == 1 and current is not None:
        return current
    raise lease_lost(ticket, current)


def fenced_params(s: Statements, ticket: Ticket, **values: Any) -> dict[str, Any]:
    """The binds of an update only ``ticket``'s claim may make, and ``values``."""
    return _params(
        s, scope=ticket.scope, key=ticket.key, owner=ticket.owner, fence=ticket.fence, **values
    )


def fenced_stamp(s: Statements, res: Res, params: dict[str, Any]) -> float:
    """The clock a fenced update that changed its row stamped it with (see statements)."""
    if s.kind == "postgresql":
        return float(res.rows[0][0])
    return res.lastrowid / 1e6 if s.mysql else float(params["now"])


def complete_params(
    s: Statements, ticket: Ticket, result: bytes, codec: str, ttl: float | None
) -> dict[str, Any]:
    """``fenced_params`` of a completion (one dict literal: every first call builds it)."""
    params = {
        "scope": ticket.scope,
        "key": ticket.key,
        "owner": ticket.owner,
        "fence": ticket.fence,
        "result": result,
        "codec": codec,
        "ttl": ttl,
    }
    if s.python_clock:
        params["now"] = time.time()
    return params


def complete(s: Statements, done: Completion, known: Record | None = None) -> Op[Record]:
    result, codec, ttl = done.result, done.codec, done.ttl
    params = complete_params(s, done.ticket, result, codec, ttl)
    change = partial(rules.completed, result=result, codec=codec, ttl=ttl)
    return _fenced(s, done.ticket, s.complete, params, known, change)


def fail(
    s: Statements, ticket: Ticket, error: bytes, ttl: float | None, known: Record | None = None
) -> Op[Record]:
    params = fenced_params(s, ticket, error=error, ttl=ttl)
    change = partial(rules.failed, error=error, ttl=ttl)
    return _fenced(s, ticket, s.fail, params, known, change)


def heartbeat(
    s: Statements, ticket: Ticket, lease: float, ttl: float | None, known: Record | None = None
) -> Op[Record]:
    params = fenced_params(s, ticket, lease=float(lease), ttl=ttl)
    change = partial(rules.renewed, lease=lease, ttl=ttl)
    return _fenced(s, ticket, s.heartbeat, params, known, change)


def release(s: Statements, ticket: Ticket) -> Op[None]:
    res = yield Stmt(s.release, fenced_params(s, ticket))
    if res.rowcount == 1:
        return None
    current, _ = yield from read(s, ticket.scope, ticket.key)
    raise lease_lost(ticket, current)


def get(s: Statements, scope: str, key: str) -> Op[Record | None]:
    current, now = yield from read(s, scope, key)
    return None if current is None or current.expired(now) else current


def now(s: Statements) -> Op[float]:
    """The database's clock (the client's, where the statement kind has no other)."""
    res = yield Stmt(s.clock, {"now": time.time()} if s.python_clock else None)
    return float(res.rows[0][0])


def forget(s: Statements, scope: str, key: str) -> Op[bool]:
    res = yield Stmt(s.forget, {"scope": scope, "key": key})
    return res.rowcount > 0


def resolve(s: Statements, scope: str, key: str, how: Resolution) -> Op[Record]:
    for _ in range(RACES):
        current, now = yield from read(s, scope, key)
        check_resolvable(scope, key, current, now, how.seen)
        assert current is not None
        if how.evict:
            # The row as read, deleted only if it still is: a claim between the read and the
            # delete makes it match nothing, and the next turn reads what it wrote.
            gone = yield from _audited(s, Stmt(s.cas_delete, _as_read(current)), how, RELEASED)
            if gone:
                return current
            continue
        new = rules.settled(current, now, how)
        done = yield from _audited(s, _cas(s, current, new), how, record_state(new))
        if done:
            return new
    raise StoreUnavailableError(f"resolve of {scope}:{key} kept losing races")


def _audited(s: Statements, write: Stmt, how: Resolution, after: str) -> Op[bool]:
    """The conditional ``write``, and with it, in one transaction, its audit row when ``how``
    carries one: the row is there if and only if the write was done."""
    if how.audit is None:
        res = yield write
        return res.rowcount == 1
    yield Stmt(s.begin)
    try:
        res = yield write
        if res.rowcount == 1:
            yield from audit.added(s.audit, how.audit.made(after))
    except BaseException:
        yield Stmt(s.rollback)
        raise
    yield Stmt(s.commit if res.rowcount == 1 else s.rollback)
    return res.rowcount == 1


def add_audit(s: Statements, entry: AuditEntry) -> Op[None]:
    """An audit row on its own (an action whose write is not one statement of this table's)."""
    yield from audit.added(s.audit, entry)


def audit_rows(s: Statements, query: AuditQuery) -> Op[list[AuditRow]]:
    rows: list[AuditRow] = yield from audit.listed(s.audit, query)
    return rows


def unresolved(s: Statements, scope: str | None, limit: int) -> Op[list[Record]]:
    if scope is None:
        res = yield Stmt(s.unresolved_all, _params(s, limit=int(limit)))
    else:
        res = yield Stmt(s.unresolved_scope, _params(s, scope=scope, limit=int(limit)))
    return [s.record(row) for row in res.rows]


class Sweep(Generic[P]):
    """Where a table's next purge resumes: after the last place (an expiry, a key) the one
    before it looked at; ``None``: at the start.

    ``mideng purge`` calls ``purge(1000)`` again and again; a purge that began at the start
    each time would read again, on every call, what the calls before it looked at and kept,
    and would take time in the square of what it deletes. Two purges in two threads may both
    move it: it is a place to resume, never a promise, so the last write wins harmlessly."""

    __slots__ = ("after",)

    def __init__(self) -> None:
        self.after: P | None = None


#: Where a sweep of the expiry index stands: (expiry, scope, key) of the last row chosen.
Place = tuple[float, str, str]
#: Below any row: a purge's first batch begins here.
START: Place = (EARLIEST, "", "")


def purge(s: Statements, limit: int | None, batch: int, sweep: Sweep[Place]) -> Op[int]:
    """Delete expired rows in bounded batches, each its own statement (a purge of millions
    never holds one long lock), following the expiry index. A purge with a ``limit`` goes on
    from where the last one stopped; one without begins at the start."""
    total = 0
    if limit is None:
        sweep.after = None
    while limit is None or total < limit:
        size = batch if limit is None else min(batch, limit - total)
        at, scope, key = START if sweep.after is None else sweep.after
        place = {"at": at, "scope": scope, "key": key, "batch": size}
        if s.purge_keys is None:  # one statement chooses and deletes (PostgreSQL)
            res = yield Stmt(s.purge, place)
            deleted, chosen, last_at = res.rows[0]
            last: Place = (float(last_at) if last_at is not None else at, "", "")
        else:
            keys = (yield Stmt(s.purge_keys, place)).rows
            chosen = len(keys)
            if not keys:
                sweep.after = None
                break
            last = (float(keys[-1][0]), _text(keys[-1][1]), _text(keys[-1][2]))
            ends = {"last_at": last[0], "last_scope": last[1], "last_key": last[2]}
            deleted = (yield Stmt(s.purge, {**place, **ends})).rowcount
        total += max(int(deleted), 0)
        if int(chosen) < size:
            # Nothing left to choose. Rows a claim held were skipped behind the sweep: the
            # next purge begins at the start again and finds them if they are still garbage.
            sweep.after = None
            break
        sweep.after = last
    return total


def _text(value: Any) -> str:
    """A key column as text, whichever type the driver hands it back in."""
    return bytes(value).decode() if isinstance(value, (bytes, bytearray)) else str(value)


def walk_keys(
    keys: Sql,
    delete: Sql,
    binds: Callable[[], dict[str, Any]],
    limit: int | None,
    batch: int,
    sweep: Sweep[tuple[str, str]],
) -> Op[int]:
    """Delete in ranges of the primary key, each its own short statement: ``keys`` reads the
    next ``:batch`` keys after ``(:scope, :key)``, ``delete`` deletes what it should between
    there and ``(:last_scope, :last_key)`` (with ``binds()``, asked per range), so every key
    is read once however many calls a purge takes. A purge with a ``limit`` goes on from where
    the last one stopped; one without begins at the start; reaching the table's end, the next
    purge begins at the start again."""
    total = 0
    after = ("", "") if limit is None or sweep.after is None else sweep.after
    while limit is None or total < limit:
        size = batch if limit is None else min(batch, limit - total)
        place = {"scope": after[0], "key": after[1], "batch": size}
        rows = (yield Stmt(keys, place)).rows
        if not rows:
            break
        last = (_text(rows[-1][0]), _text(rows[-1][1]))
        ends = {"last_scope": last[0], "last_key": last[1]}
        total += max((yield Stmt(delete, {**place, **ends, **binds()})).rowcount, 0)
        if len(rows) < size:
            break
        after = sweep.after = last
    else:
        return total  # stopped at the limit: the next purge goes on from ``after``
    sweep.after = None
    return total


def put_token(s: Statements, scope: str, key: str, token: str, ttl: float) -> Op[None]:
    yield Stmt(
        s.put_token,
        _params(s, scope=TOKEN_PREFIX + scope, key=key, owner=token, ttl=float(ttl)),
    )


def take_token(s: Statements, scope: str, key: str, token: str) -> Op[bool]:
    # One conditional DELETE: of two callers holding the same token, exactly one deletes it.
    res = yield Stmt(s.take_token, _params(s, scope=TOKEN_PREFIX + scope, key=key, owner=token))
    return res.rowcount == 1


def hit(s: Statements, scope: str, key: str, window: float, limit: int) -> Op[float | None]:
    # The insert-or-lock holds the row until COMMIT, so two hits can't both see room.
    params = {"scope": HIT_PREFIX + scope, "key": key, "window": float(window), "empty": b"[]"}
    yield Stmt(s.begin)
    res = Res(0, ())
    for sql in s.hit_lock:
        res = yield Stmt(sql, params)
    data, now = res.rows[0][0], float(res.rows[0][1])
    stamps: list[float] = [t for t in json.loads(bytes(data)) if t > now - window] if data else []
    if len(stamps) >= limit:
        yield Stmt(s.rollback)
        return max(stamps[-limit] + window - now, 0.001)
    stamps.append(now)
    yield Stmt(s.hit_store, {**params, "result": json.dumps(stamps).encode(), "now": now})
    yield Stmt(s.commit)
    return None
