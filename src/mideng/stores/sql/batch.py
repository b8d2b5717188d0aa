"""Batch claims and completions on the record table, as statement generators (mideng.db).

A batch claim is one multi-row INSERT of every key as a fresh claim, which leaves rows that
exist alone (``ON CONFLICT DO NOTHING`` on PostgreSQL, ``INSERT IGNORE`` on MySQL/MariaDB);
then, for the keys it did not take, one multi-row SELECT, and core.decide on each row found.
A batch of new keys is that one INSERT on PostgreSQL (its RETURNING names the keys taken and
their stamp); MySQL's OK packet only counts rows, so there the SELECT follows and a row whose
owner is the claim's own (owners are minted per call) is the one the INSERT made. A key the
rules say must change hands (a lapsed lease, a failure to run again) goes on through the
single claim (``ops.claim``), with the row already read: rare, and correct under any race.

A batch completion is one UPDATE of every row it completes, joined to the batch's tickets
(a derived table of one row per completion: ``UPDATE ... FROM (VALUES ...)`` on PostgreSQL,
``UPDATE ... JOIN (SELECT ... UNION ALL ...)`` on MySQL/MariaDB), each row fenced on its own
ticket exactly as the single completion is (owner, fence, still processing, not expired), so
a zombie's completion changes only nothing of its own row. PostgreSQL's RETURNING names the
rows completed and their stamp; MySQL's OK packet counts them and hands back the stamp, and
only when the count falls short are the batch's rows read, once, to tell which. The new
rows follow from the claims' own rows (kept by the store) and that stamp; a lost completion's
row, or a ticket the store did not hand out, is read in that same one SELECT.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from mideng.core import decide as rules
from mideng.core.record import ACQUIRED, SUCCEEDED, Claim, ClaimRequest, Record
from mideng.db.statements import Op, Sql, Stmt
from mideng.errors import LeaseLostError
from mideng.stores.base import lease_lost
from mideng.stores.batch import Completed, Completion, placed, rounds
from mideng.stores.record_table.ops import claim, claim_params, clipped, complete
from mideng.stores.record_table.statements import _MYSQL_STAMP, _MYSQL_STAMPED, Statements

_BIND = re.compile(r"(?<![:\w]):(\w+)")
# Per (kind, table, rows): the texts never change, and batch sizes are few.
_TEXTS: dict[tuple[str, str, str, int], Sql] = {}
_LIMIT = 512


def _numbered(text: str, i: int) -> str:
    return _BIND.sub(lambda m: f":{m.group(1)}_{i}", text)


def _cached(s: Statements, what: str, n: int, build: Any) -> Sql:
    found = _TEXTS.get((s.kind, s.table, what, n))
    if found is None:
        if len(_TEXTS) >= _LIMIT:
            _TEXTS.clear()
        found = _TEXTS[(s.kind, s.table, what, n)] = Sql(build())
    return found


def _key_col(s: Statements) -> str:
    return "`key`" if s.mysql else "key"


def _bind(s: Statements, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One statement's parameters for many rows: on PostgreSQL an array per column (the
    statements unnest them), elsewhere each row's binds numbered ``_0`` .. ``_{n-1}``."""
    if s.kind == "postgresql":
        return {name: [row[name] for row in rows] for name in rows[0]}
    return {f"{name}_{n}": value for n, row in enumerate(rows) for name, value in row.items()}


# On PostgreSQL a batch's rows travel as arrays, one per column, so each statement is one
# short text whatever the batch size: psycopg converts a long text's placeholders anew on
# every execution (its cache takes texts up to 4 KiB; a VALUES list of 100 claims is 40 KiB
# and cost 1.2 ms), and the server plans one statement, not one per size.
_ARRAYS = {
    "scope": "text",
    "key": "text",
    "owner": "text",
    "fingerprint": "text",
    "lease": "double precision",
    "expiry_ttl": "double precision",
    "request_id": "text",
    "fence": "bigint",
    "result": "bytea",
    "codec": "text",
    "ttl": "double precision",
}


def _unnest(*names: str) -> str:
    arrays = ", ".join(f"CAST(:{n} AS {_ARRAYS[n]}[])" for n in names)
    return f"unnest({arrays}) AS u ({', '.join(names)})"


def insert_many(s: Statements, n: int) -> Sql:
    """The fresh-claim insert of ``n`` rows, binds numbered ``_0`` .. ``_{n-1}``."""
    assert s.insert is not None

    def build() -> str:
        if s.kind == "postgresql":
            # The one-row insert's own expressions, over the unnested rows.
            lease, now = "u.lease", s.now
            return (
                f"INSERT INTO {s.table} ({s.cols}) SELECT u.scope, u.key, 'processing', 1, "
                f"u.owner, u.fingerprint, {now} + {lease}, NULL, NULL, NULL, 1, u.request_id, "
                f"{now}, {now}, {now} + {lease} + u.expiry_ttl FROM "
                + _unnest(
                    "scope", "key", "owner", "fingerprint", "lease", "expiry_ttl", "request_id"
                )
                + " ON CONFLICT (scope, key) DO NOTHING RETURNING scope, key, created_at"
            )
        head, rest = s.insert.text.split(" VALUES ", 1)  # type: ignore[union-attr]
        values, _, _tail = rest.partition(" ON CONFLICT ")
        # The stamp trick of the one-row insert means nothing over many rows.
        values = values.replace(
            "LAST_INSERT_ID(ROUND(@@timestamp * 1e6)) / 1e6", "ROUND(@@timestamp * 1e6) / 1e6"
        )
        rows = ", ".join(_numbered(values, i) for i in range(n))
        if s.mysql:
            return f"{head} VALUES {rows}"
        k = _key_col(s)
        tail = f" ON CONFLICT (scope, {k}) DO NOTHING"
        return f"{head} VALUES {rows}{tail}" + (
            f" RETURNING scope, {k}, created_at" if s.kind == "postgresql" else ""
        )

    return _cached(s, "insert", 0 if s.kind == "postgresql" else n, build)


def select_many(s: Statements, n: int) -> Sql:
    """``s.select``'s row, and the row's scope and key first, for ``n`` keys."""

    def build() -> str:
        row = s.select.text[len("SELECT ") : s.select.text.index(" FROM ")]
        k = _key_col(s)
        if s.kind == "postgresql":
            return (
                f"SELECT scope, {k}, {row} FROM {s.table} WHERE (scope, {k}) IN "
                f"(SELECT * FROM {_unnest('scope', 'key')})"
            )
        keys = ", ".join(f"(:scope_{i}, :key_{i})" for i in range(n))
        return f"SELECT scope, {k}, {row} FROM {s.table} WHERE (scope, {k}) IN ({keys})"

    return _cached(s, "select", 0 if s.kind == "postgresql" else n, build)


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8")  # MySQL's VARBINARY scope and key
    return str(value)


def claim_many(s: Statements, reqs: Sequence[ClaimRequest]) -> Op[list[Claim]]:
    reqs = [clipped(r) for r in reqs]
    where = {(r.scope, r.key): i for i, r in enumerate(reqs)}
    answers: list[Claim | None] = [None] * len(reqs)
    # Rows in one order for every batch: two batches inserting overlapping keys in different
    # orders would each hold a key the other waits for.
    ordered = sorted(range(len(reqs)), key=lambda i: (reqs[i].scope, reqs[i].key))
    rows = [claim_params(s, reqs[i]) for i in ordered]
    res = yield Stmt(insert_many(s, len(reqs)), _bind(s, rows))
    if s.kind == "postgresql":
        for scope, key, stamp in res.rows:
            i = where[(_text(scope), _text(key))]
            answers[i] = Claim(ACQUIRED, rules.fresh(reqs[i], float(stamp), None))
    rest = [i for i, a in enumerate(answers) if a is None]
    if not rest:
        return [a for a in answers if a is not None]
    keys = _bind(s, [{"scope": reqs[i].scope, "key": reqs[i].key} for i in rest])
    if s.python_clock:
        keys["now"] = rows[0]["now"]
    found: dict[tuple[str, str], tuple[Record, float]] = {}
    for row in (yield Stmt(select_many(s, len(rest)), keys)).rows:
        scope, key = _text(row[0]), _text(row[1])
        found[(scope, key)] = s.current(row[2:], scope, key)
    for i in rest:
        req = reqs[i]
        got = found.get((req.scope, req.key))
        if got is not None and got[0].owner == req.owner:
            answers[i] = Claim(ACQUIRED, got[0])  # this batch's insert (MySQL)
            continue
        if got is not None:
            decision, write = rules.decide(got[0], req, got[1])
            if not write:
                answers[i] = decision
                continue
        answers[i] = yield from claim(s, req, got)
    return [a for a in answers if a is not None]


def update_many(s: Statements, n: int) -> Sql:
    """The fenced completion of ``n`` rows in one statement, binds numbered ``_0`` ..
    ``_{n-1}`` (scope, key, owner, fence, result, codec, ttl)."""

    def build() -> str:
        t, now = s.table, s.now
        fence = f"r.status = 'processing' AND (r.expires_at IS NULL OR r.expires_at > {now})"
        if s.kind == "postgresql":
            return (
                f"UPDATE {t} AS r SET updated_at = {now}, status = 'succeeded', "
                f"result = u.result, codec = u.codec, error = NULL, lease_until = NULL, "
                f"expires_at = {now} + u.ttl "
                f"FROM {_unnest('scope', 'key', 'owner', 'fence', 'result', 'codec', 'ttl')} "
                f"WHERE r.scope = u.scope AND r.key = u.key AND r.owner = u.owner "
                f"AND r.fence = u.fence AND {fence} RETURNING r.scope, r.key, r.updated_at"
            )
        first = (
            "SELECT :scope_0 AS scope, :key_0 AS k, :owner_0 AS owner, :fence_0 AS fence, "
            ":result_0 AS result, :codec_0 AS codec, :ttl_0 AS ttl"
        )
        rest = "".join(
            f" UNION ALL SELECT :scope_{i}, :key_{i}, :owner_{i}, :fence_{i}, :result_{i}, "
            f":codec_{i}, :ttl_{i}"
            for i in range(1, n)
        )
        # The tickets first, each row then found by its primary key (STRAIGHT_JOIN: the
        # optimizer would otherwise scan the table's processing rows and probe the tickets).
        # A multi-table UPDATE sets its columns in no promised order, so the expiry is
        # computed from the clock itself, not from the updated_at just assigned.
        return (
            f"UPDATE ({first}{rest}) AS v STRAIGHT_JOIN {t} AS r "
            f"ON r.scope = v.scope AND r.`key` = v.k "
            f"AND r.owner = v.owner AND r.fence = v.fence AND {fence} "
            f"SET r.updated_at = {_MYSQL_STAMP}, r.status = 'succeeded', r.result = v.result, "
            f"r.codec = v.codec, r.error = NULL, r.lease_until = NULL, "
            f"r.expires_at = {_MYSQL_STAMPED} + v.ttl"
        )

    return _cached(s, "complete", 0 if s.kind == "postgresql" else n, build)


def complete_many(
    s: Statements, items: Sequence[Completion], known: Sequence[Record | None]
) -> Op[list[Completed]]:
    """Each completion's record, or its LeaseLostError; ``known``: each claim's own row."""
    if s.kind != "postgresql" and not s.mysql:  # SQLite's statements: one update each
        return (yield from _each(s, items, known))
    # One statement can't complete a row twice, nor answer which of a key's items it used.
    parts = rounds(items)
    if parts is not None:
        answers = []
        for p in parts:
            answers.append(
                (yield from complete_many(s, [items[i] for i in p], [known[i] for i in p]))
            )
        return placed(len(items), parts, answers)
    # Rows in one order for every batch, as for the claims (a zombie's batch may overlap).
    ordered = sorted(range(len(items)), key=lambda i: (items[i].ticket.scope, items[i].ticket.key))
    rows = [
        {
            "scope": items[i].ticket.scope,
            "key": items[i].ticket.key,
            "owner": items[i].ticket.owner,
            "fence": items[i].ticket.fence,
            "result": items[i].result,
            "codec": items[i].codec,
            "ttl": items[i].ttl,
        }
        for i in ordered
    ]
    res = yield Stmt(update_many(s, len(items)), _bind(s, rows))
    # Which rows the update completed, each with its stamp; None: ask the rows themselves.
    done: dict[tuple[str, str], float] | None
    stamp = 0.0
    if s.kind == "postgresql":
        done = {(_text(r[0]), _text(r[1])): float(r[2]) for r in res.rows}
    else:
        stamp = res.lastrowid / 1e6 if res.rowcount > 0 else 0.0
        everyone = res.rowcount == len(items)
        done = {(i.ticket.scope, i.ticket.key): stamp for i in items} if everyone else None
    out: list[Completed | None] = [None] * len(items)
    unread: list[int] = []
    for i, (item, row) in enumerate(zip(items, known, strict=True)):
        t = item.ticket
        at = None if done is None else done.get((t.scope, t.key))
        if at is not None and row is not None and (row.owner, row.fence) == (t.owner, t.fence):
            out[i] = rules.completed(row, at, result=item.result, codec=item.codec, ttl=item.ttl)
        else:
            unread.append(i)
    if unread:
        keys = _bind(
            s, [{"scope": items[i].ticket.scope, "key": items[i].ticket.key} for i in unread]
        )
        found: dict[tuple[str, str], Record] = {}
        for r in (yield Stmt(select_many(s, len(unread)), keys)).rows:
            scope, key = _text(r[0]), _text(r[1])
            found[(scope, key)] = s.current(r[2:], scope, key)[0]
        for i in unread:
            t = items[i].ticket
            current = found.get((t.scope, t.key))
            if done is not None:
                ours = (t.scope, t.key) in done
            else:  # MySQL short of the count: ours are the rows completed at our stamp
                ours = (
                    current is not None
                    and res.rowcount > 0
                    and (current.owner, current.fence) == (t.owner, t.fence)
                    and current.status is SUCCEEDED
                    and current.updated_at == stamp
                )
            out[i] = current if ours and current is not None else lease_lost(t, current)
    return [a for a in out if a is not None]


def _each(
    s: Statements, items: Sequence[Completion], known: Sequence[Record | None]
) -> Op[list[Completed]]:
    out: list[Completed] = []
    for item, row in zip(items, known, strict=True):
        try:
            out.append((yield from complete(s, item, row)))
        except LeaseLostError as exc:
            out.append(exc)
    return out
