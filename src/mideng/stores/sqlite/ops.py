"""The SQLite store's own operations, each a generator of statements (mideng.db) on its
statement set (``statements.SQLiteStatements``).

The record operations are the record table's own (``stores.record_table.ops``) on the ``sqlite``
statement set, every one an autocommit statement (an insert that yields to a racer, a fenced
update, a compare-and-set on the row as read): SQLite makes each atomic across threads and
processes by itself, so no ``BEGIN IMMEDIATE`` is needed for them. Only a read-decide-write
that no single statement can express (``transact``: the debounce window's stamps) takes the
write lock for its span. ``records`` reads every row (the operator's views); ``purge`` walks
the primary key in bounded ranges.
"""

from __future__ import annotations

import time
from typing import Any

from mideng.core.record import Record
from mideng.db.statements import Op, Stmt
from mideng.stores.base import KEEP, Step, T
from mideng.stores.record_table.ops import Sweep, walk_keys
from mideng.stores.record_table.rows import record
from mideng.stores.sqlite.statements import SQLiteStatements


def _row_params(r: Record) -> dict[str, Any]:
    return {
        "scope": r.scope,
        "key": r.key,
        "status": r.status.value,
        "fence": r.fence,
        "owner": r.owner,
        "fingerprint": r.fingerprint,
        "lease_until": r.lease_until,
        "result": r.result,
        "codec": r.codec,
        "error": r.error,
        "attempts": r.attempts,
        "request_id": r.request_id,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
        "expires_at": r.expires_at,
    }


def transact(s: SQLiteStatements, scope: str, key: str, step: Step[T]) -> Op[T]:
    """Read (scope, key), let ``step(record, now)`` decide, write what it returns; all under the
    write lock. Whoever drives it rolls back when anything raises."""
    yield Stmt(s.begin)
    res = yield Stmt(s.row, {"scope": scope, "key": key})
    current = record(res.rows[0]) if res.rows else None
    answer, new = step(current, time.time())
    if new is None:
        if current is not None:
            yield Stmt(s.forget, {"scope": scope, "key": key})
    elif new is not KEEP:
        yield Stmt(s.put, _row_params(new))
    yield Stmt(s.commit)
    return answer


def records(s: SQLiteStatements) -> Op[list[Record]]:
    res = yield Stmt(s.all_rows)
    return [record(row) for row in res.rows]


def purge(
    s: SQLiteStatements, limit: int | None, batch: int, sweep: Sweep[tuple[str, str]]
) -> Op[int]:
    """Delete expired rows, ``batch`` keys at a time, walking the primary key (the table has
    no expiry index; see ``walk_keys``). Each range is judged at its own statement's clock."""
    return (yield from walk_keys(s.sweep_keys, s.sweep, _clock, limit, batch, sweep))


def _clock() -> dict[str, Any]:
    return {"now": time.time()}
