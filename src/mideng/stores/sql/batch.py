"""Batch claims and completions on the record table, as statement generators (mideng.db).

A batch claim is one multi-row INSERT of every key as a fresh claim, which leaves rows that
exist alone (``ON CONFLICT DO NOTHING`` on PostgreSQL, ``INSERT IGNORE`` on MySQL/MariaDB);
then, for the keys it did not take, one multi-row SELECT, and core.decide on each row found.
A batch of new keys is that one INSERT on PostgreSQL (its RETURNING names the keys taken and
their stamp); MySQL's OK packet only counts rows, so there the SELECT follows and a row whose
owner is the claim's own (owners are minted per call) is the one the INSERT made. A key the
rules say must change hands (a lapsed lease, a failure to run again) goes on through the
single claim (``ops.claim``), with the row already read: rare, and correct under any race.

A batch completion is each completion's own fenced UPDATE (``ops.complete``, which needs no
read-back with the claim's row in hand), all on the one connection the operation holds: one
pool checkout for the batch, a statement per record.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from mideng.core import decide as rules
from mideng.core.record import ACQUIRED, Claim, ClaimRequest, Record
from mideng.db.statements import Op, Sql, Stmt
from mideng.errors import LeaseLostError
from mideng.stores.batch import Completed, Completion
from mideng.stores.sql.ops import claim, claim_params, clipped, complete
from mideng.stores.sql.statements import Statements

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


def insert_many(s: Statements, n: int) -> Sql:
    """The fresh-claim insert of ``n`` rows, binds numbered ``_0`` .. ``_{n-1}``."""
    assert s.insert is not None

    def build() -> str:
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

    return _cached(s, "insert", n, build)


def select_many(s: Statements, n: int) -> Sql:
    """``s.select``'s row, and the row's scope and key first, for ``n`` keys."""

    def build() -> str:
        row = s.select.text[len("SELECT ") : s.select.text.index(" FROM ")]
        k = _key_col(s)
        keys = ", ".join(f"(:scope_{i}, :key_{i})" for i in range(n))
        return f"SELECT scope, {k}, {row} FROM {s.table} WHERE (scope, {k}) IN ({keys})"

    return _cached(s, "select", n, build)


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8")  # MySQL's VARBINARY scope and key
    return str(value)


def claim_many(s: Statements, reqs: Sequence[ClaimRequest]) -> Op[list[Claim]]:
    reqs = [clipped(r) for r in reqs]
    where = {(r.scope, r.key): i for i, r in enumerate(reqs)}
    answers: list[Claim | None] = [None] * len(reqs)
    params: dict[str, Any] = {}
    # Rows in one order for every batch: two batches inserting overlapping keys in different
    # orders would each hold a key the other waits for.
    ordered = sorted(range(len(reqs)), key=lambda i: (reqs[i].scope, reqs[i].key))
    for n, i in enumerate(ordered):
        for name, value in claim_params(s, reqs[i]).items():
            params[f"{name}_{n}"] = value
    res = yield Stmt(insert_many(s, len(reqs)), params)
    if s.kind == "postgresql":
        for scope, key, stamp in res.rows:
            i = where[(_text(scope), _text(key))]
            answers[i] = Claim(ACQUIRED, rules.fresh(reqs[i], float(stamp), None))
    rest = [i for i, a in enumerate(answers) if a is None]
    if not rest:
        return [a for a in answers if a is not None]
    keys: dict[str, Any] = {}
    for n, i in enumerate(rest):
        keys[f"scope_{n}"], keys[f"key_{n}"] = reqs[i].scope, reqs[i].key
    if s.python_clock:
        keys["now"] = params["now_0"]
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


def complete_many(
    s: Statements, items: Sequence[Completion], known: Sequence[Record | None]
) -> Op[list[Completed]]:
    """Each completion's record, or its LeaseLostError; ``known``: each claim's own row."""
    out: list[Completed] = []
    for item, row in zip(items, known, strict=True):
        try:
            out.append(
                (yield from complete(s, item.ticket, item.result, item.codec, item.ttl, row))
            )
        except LeaseLostError as exc:
            out.append(exc)
    return out
