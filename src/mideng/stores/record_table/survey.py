"""The survey and ``purge_older`` of a record table, as operations (any kind, any loop).

Counts come from the database, never from rows shipped to the client: one GROUP BY for scopes
and statuses that also gives the oldest processing record and the stuck count, range counts
over the ``expires_at`` index for the spread of remaining retention, the ``(status,
lease_until)`` index for the stuck records listed. Only the
biggest-records list reads every row's sizes (``biggest=0`` skips it). Every statement reads
the clock the first one fetched, so the counts agree with each other. The survey capability
runs them on the SQL store's executors (``stores.sql.survey``) and on the SQLite store's
connection (``stores.sqlite.survey``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from mideng.core.record import Record
from mideng.db.statements import Op, Res, Sql, Stmt
from mideng.schema.records import UNRESOLVED, rows_table
from mideng.stores.record_table.ops import Sweep, walk_keys
from mideng.stores.record_table.statements import Statements
from mideng.stores.survey import (
    ESTIMATE_ABOVE,
    EXPIRY_BUCKETS,
    STATUSES,
    STUCK_LISTED,
    Big,
    Outcomes,
    Position,
    RecordQuery,
    Stuck,
    Survey,
    SurveyTerms,
)

PURGE_BATCH = 1000
#: Pages of a big PostgreSQL table read to estimate its succeeded records (8 MB at 8 kB a page).
SAMPLE_PAGES = 1000
#: The scopes of a table's rows that are not records, as primary-key ranges (bound, not
#: written in: the range ends after ':' with ';', which a statement text may not hold).
_NOT_RECORDS = {"token": "token:", "token_end": "token;", "hit": "hit:", "hit_end": "hit;"}
#: A group's oldest record: a processing one by its first claim, an UNKNOWN one by when it
#: became UNKNOWN (its last write).
_FIRST = "min(CASE WHEN status = 'unknown' THEN updated_at ELSE created_at END)"
_FINISHED = "status IN ('succeeded', 'failed')"
_LIVE = "(expires_at IS NULL OR expires_at > :at)"


class Queries:
    """The statements of one table, for one kind."""

    def __init__(self, s: Statements) -> None:
        t = s.table
        k = "`key`" if s.mysql else "key"
        size = "length" if s.kind == "sqlite" else "octet_length"
        # Records only (no token or debounce rows), of the scopes under :prefix.
        rec = (
            "substr(scope, 1, 6) <> 'token:' AND substr(scope, 1, 4) <> 'hit:' "
            "AND (:plen = 0 OR substr(scope, 1, :plen) = :prefix)"
        )

        def counted(where: str) -> Sql:
            """How many surveyed records ``where`` holds."""
            return Sql(f"SELECT count(*) FROM {t} WHERE {where} AND {rec}")

        self.clock = Sql(f"SELECT {s.now}")
        # One pass gives the counts, each group's oldest record and its leases run out past
        # :cut: the processing groups' are the oldest processing record and the stuck count.
        self.by_scope = Sql(
            f"SELECT scope, status, count(*), {_FIRST}, "
            f"sum(CASE WHEN lease_until <= :cut THEN 1 ELSE 0 END) FROM {t} "
            f"WHERE {_LIVE} AND {rec} GROUP BY scope, status"
        )
        self.expiring = counted("expires_at > :lo AND expires_at <= :hi")
        self.expiring_later = counted("expires_at > :lo")
        self.expired = counted("expires_at <= :at")
        self.never = Sql(
            f"SELECT scope, count(*) FROM {t} WHERE expires_at IS NULL AND {rec} GROUP BY scope"
        )
        stuck = f"status = 'processing' AND lease_until <= :cut AND {_LIVE}"
        if s.kind == "sqlite":  # the partial index's own term, so SQLite reads it
            stuck = f"{UNRESOLVED} AND {stuck}"
        self.stuck = Sql(
            f"SELECT scope, {k}, fence, lease_until, request_id FROM {t} WHERE {stuck} "
            f"AND {rec} ORDER BY lease_until LIMIT :limit"
        )
        self._estimates(s, rec)
        self.biggest = Sql(
            f"SELECT scope, {k}, coalesce({size}(result), 0) + coalesce({size}(error), 0) AS n "
            f"FROM {t} WHERE {_LIVE} AND {rec} ORDER BY n DESC LIMIT :limit"
        )
        self._listing = f"SELECT {s.cols} FROM {t} WHERE {_LIVE} AND {rec}"
        self._k = k
        bucket = "(updated_at - :since) / :width"
        bucket = f"CAST({bucket} AS INTEGER)" if s.kind == "sqlite" else f"floor({bucket})"
        self.outcomes = Sql(
            f"SELECT {bucket} AS b, status, count(*) FROM {t} WHERE updated_at >= :since "
            f"AND {rec} GROUP BY b, status"
        )
        self.sampled_outcomes = Sql(
            f"SELECT {bucket} AS b, status, count(*) FROM {t} TABLESAMPLE SYSTEM (:percent) "
            f"WHERE updated_at >= :since AND {rec} GROUP BY b, status"
        )
        self._mysql = s.mysql
        self._sqlite = s.kind == "sqlite"
        self._pages: dict[tuple[bool, str | None], Sql] = {}
        self.with_request_id = Sql(
            f"{self._listing} AND request_id = :request_id ORDER BY scope, {k} LIMIT :limit"
        )
        # ``purge --older-than`` walks the primary key (no index holds ``updated_at``):
        # ``older_keys`` reads the next :batch keys, ``purge_older`` deletes the old finished
        # records between there and the last of them (``ops.walk_keys``), so each key is read
        # once however many calls a purge takes, where a DELETE … LIMIT scanned again from the
        # start every batch past all it had kept.
        old = f"{_FINISHED} AND updated_at <= :cutoff AND {rec}"
        after = self._after(("scope", k), (":scope", ":key"))
        upto = self._after(("scope", k), (":last_scope", ":last_key"), "<=")
        self.older_keys = Sql(
            f"SELECT scope, {k} FROM {t} WHERE {after} ORDER BY scope, {k} LIMIT :batch"
        )
        span = f"{after} AND {upto} AND {old}"
        if s.mysql:  # the row comparison spelt out: the scope's range, for the optimizer
            span = f"scope BETWEEN :scope AND :last_scope AND {span}"
        if s.kind == "postgresql":
            # SKIP LOCKED: a row a claim is re-taking right now is not ours to delete, nor
            # worth a wait. The rows are chosen once, in a MATERIALIZED CTE (as an IN
            # (subquery) it can be rescanned per row), and found again by their ctid (a TID
            # scan: joined on the key, the planner may hash the whole table per batch).
            self.purge_older = Sql(
                f"WITH doomed AS MATERIALIZED (SELECT ctid FROM {t} WHERE {span} "
                f"FOR UPDATE SKIP LOCKED) DELETE FROM {t} "
                f"WHERE ctid = ANY (ARRAY(SELECT ctid FROM doomed)) AND {old}"
            )
            self.purge_older.rows = False  # a DELETE, though its text starts WITH
        else:
            self.purge_older = Sql(f"DELETE FROM {t} WHERE {span}")

    def _estimates(self, s: Statements, rec: str) -> None:
        """The statements of a big table's survey (module docstring): the unresolved records
        counted through an index, the succeeded ones estimated."""
        t, lapsed = s.table, "sum(CASE WHEN lease_until <= :cut THEN 1 ELSE 0 END)"
        group = f"AND {_LIVE} AND {rec} GROUP BY scope"
        #: Whether the succeeded records are sampled by scope (PostgreSQL's TABLESAMPLE) or
        #: estimated as the table's rows less the others (its statistics, or SQLite's count).
        self.sampled = s.kind == "postgresql"
        if s.kind == "sqlite":  # one covering partial index (schema.records, version 3)
            self.open_counts = Sql(
                f"SELECT scope, status, count(*), {_FIRST}, {lapsed} FROM {t} "
                f"WHERE {UNRESOLVED} {group}, status"
            )
        else:  # the _open index; on MySQL/MariaDB it holds failed records too
            self.open_counts = Sql(
                f"SELECT scope, status, count(*), {_FIRST}, {lapsed} FROM {t} "
                f"WHERE status IN ('processing', 'unknown') {group}, status"
            )
        self.failed_counts: Sql | None = None
        self.failed_expired: Sql | None = None
        if s.kind == "postgresql":  # index-only on the _failed index
            self.failed_counts = Sql(
                f"SELECT scope, count(*) FROM {t} WHERE status = 'failed' {group}"
            )
        elif s.mysql:
            # Every failed record, index-only on _open (its entries hold the primary key, so
            # the scope); the expired ones, found by the expires_at index, taken off. Reading
            # expires_at of each failed record instead would be a row lookup apiece.
            self.failed_counts = Sql(
                f"SELECT scope, count(*) FROM {t} WHERE status = 'failed' AND {rec} GROUP BY scope"
            )
            self.failed_expired = Sql(
                f"SELECT scope, count(*) FROM {t} FORCE INDEX ({t}_expires) WHERE "
                f"expires_at <= :at AND status = 'failed' AND {rec} GROUP BY scope"
            )
        if s.kind == "postgresql":
            # The planner's row count decides exact or estimated; the pages as they are now
            # size the sample (reltuples is -1 before the first ANALYZE).
            self.size = Sql(
                "SELECT reltuples, pg_relation_size(oid) / current_setting('block_size')::int "
                f"FROM pg_class WHERE oid = to_regclass('{t}')"
            )
            self.succeeded = Sql(
                f"SELECT scope, count(*) FROM {t} TABLESAMPLE SYSTEM (:percent) "
                f"WHERE status = 'succeeded' {group}"
            )
        elif s.mysql:
            # InnoDB's row count: kept up by every insert and delete, reset by ANALYZE TABLE.
            self.size = Sql(
                "SELECT table_rows FROM information_schema.tables "
                f"WHERE table_schema = database() AND table_name = '{t}'"
            )
        else:  # kept by triggers (schema.records, version 3): count(*) reads every page
            self.size = Sql(f"SELECT n FROM {rows_table(t)}")
        # Rows that are not records (tokens, debounce hits): primary-key ranges.
        self.not_records = Sql(
            f"SELECT count(*) FROM {t} WHERE (scope >= :token AND scope < :token_end) "
            "OR (scope >= :hit AND scope < :hit_end)"
        )
        self.expired_records: Sql | None = None
        if s.mysql:  # the expires_at index; SQLite's table has none
            self.expired_records = Sql(
                f"SELECT count(*) FROM {t} WHERE expires_at <= :at AND {rec}"
            )

    def page(self, query: RecordQuery) -> Sql:
        """The statement of ``query``'s page: keyset on the primary key, or on the open
        statuses' ``(status, lease_until)`` index. The status is written into the text (one of
        ``STATUSES``), so PostgreSQL sees that a partial index on the open statuses covers it
        whatever the plan's parameters."""
        shape = (query.scope is not None, query.status)
        found = self._pages.get(shape)
        if found is not None:
            return found
        k, status = self._k, query.status
        if status is not None and status not in STATUSES:
            raise ValueError(f"no status {status!r}")
        where = "" if status is None else f" AND status = '{status}'"
        if query.by_lease and self._sqlite:
            # SQLite reads a partial index only for a query that writes out its predicate:
            # the leased statuses are unresolved, and ``_unresolved`` (schema version 3) holds
            # them by (status, lease_until).
            where += f" AND {UNRESOLVED}"
        if query.by_lease:
            after = self._after(
                ("coalesce(lease_until, 0)", "scope", k), (":lease", ":scope", ":key")
            )
            order = f"coalesce(lease_until, 0), scope, {k}"
            if not self._mysql:
                after = after.replace("coalesce(lease_until, 0)", "lease_until")
                order = order.replace("coalesce(lease_until, 0)", "lease_until")
        elif query.scope is not None:
            after, order = f"scope = :scope AND {k} > :key", k
        else:
            after, order = self._after(("scope", k), (":scope", ":key")), f"scope, {k}"
        found = self._pages[shape] = Sql(
            f"{self._listing}{where} AND {after} ORDER BY {order} LIMIT :limit"
        )
        return found

    def _after(self, columns: tuple[str, ...], binds: tuple[str, ...], op: str = ">") -> str:
        """Rows past a keyset position (``op`` ``<=``: up to and at it): a row value
        comparison (PostgreSQL and SQLite walk their index from it), spelt out on
        MySQL/MariaDB."""
        if not self._mysql:
            return f"({', '.join(columns)}) {op} ({', '.join(binds)})"
        terms = []
        for n, (column, bind) in enumerate(zip(columns, binds, strict=True)):
            equal = [f"{c} = {b}" for c, b in zip(columns[:n], binds[:n], strict=True)]
            last = op if n == len(columns) - 1 else op[0]
            terms.append("(" + " AND ".join([*equal, f"{column} {last} {bind}"]) + ")")
        return "(" + " OR ".join(terms) + ")"


_QUERIES: dict[tuple[str, str], Queries] = {}


def queries(s: Statements) -> Queries:
    found = _QUERIES.get((s.kind, s.table))
    if found is None:
        found = _QUERIES[(s.kind, s.table)] = Queries(s)
    return found


def _tally(found: Survey, rows: Sequence[Sequence[Any]]) -> None:
    """``(scope, status, count, oldest, leases run out)`` rows, into ``found``: the
    processing groups' are the oldest processing record and the stuck count, the UNKNOWN
    groups' the oldest UNKNOWN one (``_FIRST``)."""
    oldest: list[float] = []
    unknown: list[float] = []
    for scope, status, n, first, lapsed in rows:
        found.count(_text(scope), str(status), int(n))
        if str(status) == "processing":
            oldest.append(float(first))
            found.stuck_count += int(lapsed or 0)
        elif str(status) == "unknown":
            unknown.append(float(first))
    found.oldest_processing_since = min(oldest, default=None)
    found.oldest_unknown_since = min(unknown, default=None)


def _estimate(
    q: Queries, found: Survey, cut: dict[str, Any], rows: float, pages: float
) -> Op[None]:
    """A big table's survey: processing, UNKNOWN and failed records counted exactly through
    their indexes; the succeeded ones estimated, by scope from a sample of ``SAMPLE_PAGES``
    pages (PostgreSQL), else as the table's ``rows`` less everything counted."""
    _tally(found, (yield Stmt(q.open_counts, cut)).rows)
    if q.failed_counts is not None:
        for scope, n in (yield Stmt(q.failed_counts, cut)).rows:
            found.count(_text(scope), "failed", int(n))
    if q.failed_expired is not None:
        for scope, n in (yield Stmt(q.failed_expired, cut)).rows:
            found.count(_text(scope), "failed", -int(n))
    found.estimated = True
    if q.sampled:
        percent = min(100.0, 100.0 * SAMPLE_PAGES / max(pages, 1.0))
        for scope, n in (yield Stmt(q.succeeded, {**cut, "percent": percent})).rows:
            found.count(_text(scope), "succeeded", round(int(n) * 100.0 / percent))
        return
    others = found.total + int(_one((yield Stmt(q.not_records, _NOT_RECORDS))))
    if q.expired_records is not None:
        others += int(_one((yield Stmt(q.expired_records, cut))))
    found.unscoped["succeeded"] = max(0, round(rows) - others)


def _one(res: Res) -> Any:
    return res.rows[0][0] if res.rows else None


def survey(s: Statements, terms: SurveyTerms) -> Op[Survey]:
    q = queries(s)
    now = float((yield Stmt(q.clock, {"now": time.time()})).rows[0][0])
    prefix = terms.prefix or ""
    p: dict[str, Any] = {"at": now, "prefix": prefix, "plen": len(prefix)}
    found = Survey(now)
    cut = {**p, "cut": now - terms.grace}
    size = None
    # Only the sample is filtered by prefix: elsewhere the table's row count covers all scopes.
    if terms.estimable and (q.sampled or not prefix):
        size = (yield Stmt(q.size, {})).rows[0]
    if size is not None and float(size[0]) > terms.estimate_above:
        pages = float(size[1]) if len(size) > 1 else 0.0  # PostgreSQL's, to size its sample
        yield from _estimate(q, found, cut, float(size[0]), pages)
    else:
        _tally(found, (yield Stmt(q.by_scope, cut)).rows)
    if terms.spread:
        yield from _spread(q, found, p)
    if found.stuck_count:  # listed only when there are any: a scan where no index serves it
        rows = (yield Stmt(q.stuck, {**cut, "limit": STUCK_LISTED})).rows
        found.stuck = [
            Stuck(_text(sc), _text(key), int(fence), now - float(lease), rid)
            for sc, key, fence, lease, rid in rows
        ]
    if terms.biggest > 0:
        rows = (yield Stmt(q.biggest, {**p, "limit": int(terms.biggest)})).rows
        found.biggest = [Big(_text(sc), _text(key), int(n)) for sc, key, n in rows]
    return found


def list_records(s: Statements, query: RecordQuery) -> Op[list[Record]]:
    """A page of records (``stores.survey.RecordQuery``)."""
    q = queries(s)
    at = yield from _clock(s, q)
    start = query.after or Position(query.scope or "", "", None)
    params = {
        "at": at,
        # A page of one scope stays in it, whatever scope the position came from.
        "scope": start.scope if query.scope is None else query.scope,
        "key": start.key,
        # Leases are epoch seconds: -1 is below every one (a first page of the lease order).
        "lease": -1.0 if start.lease_until is None else start.lease_until,
        "limit": int(query.limit),
        "prefix": "",
        "plen": 0,
    }
    res = yield Stmt(q.page(query), params)
    return [s.record(row) for row in res.rows]


def with_request_id(s: Statements, request_id: str, limit: int) -> Op[list[Record]]:
    q = queries(s)
    at = yield from _clock(s, q)
    params = {"at": at, "request_id": request_id, "limit": int(limit), "prefix": "", "plen": 0}
    res = yield Stmt(q.with_request_id, params)
    return [s.record(row) for row in res.rows]


def outcomes(s: Statements, since: float, width: float) -> Op[Outcomes]:
    """Records last written since ``since`` by status and bucket: on a PostgreSQL table
    holding more than ``ESTIMATE_ABOVE`` records, from a sample of
    ``SAMPLE_PAGES`` pages scaled up (``updated_at`` has no index: an index on a column every
    write changes would cost each claim its in-place update)."""
    q = queries(s)
    p = {"since": since, "width": width, "prefix": "", "plen": 0}
    percent = 100.0
    if q.sampled:
        rows, pages = (yield Stmt(q.size, {})).rows[0]
        if float(rows) > ESTIMATE_ABOVE:
            percent = min(100.0, 100.0 * SAMPLE_PAGES / max(float(pages), 1.0))
    if percent >= 100.0:
        res = yield Stmt(q.outcomes, p)
        return Outcomes(since, width, [(int(b), str(st), int(n)) for b, st, n in res.rows])
    res = yield Stmt(q.sampled_outcomes, {**p, "percent": percent})
    counts = [(int(b), str(st), round(int(n) * 100.0 / percent)) for b, st, n in res.rows]
    return Outcomes(since, width, counts, estimated=True)


def _clock(s: Statements, q: Queries) -> Op[float]:
    """The database's clock, which says which records are live."""
    return float((yield Stmt(q.clock, {"now": time.time()})).rows[0][0])


def _spread(q: Queries, found: Survey, p: dict[str, Any]) -> Op[None]:
    """The spread of remaining retention, into ``found``."""
    now = found.now
    lo = now
    for label, bound in EXPIRY_BUCKETS:
        found.expiry[label] = int(
            _one((yield Stmt(q.expiring, {**p, "lo": lo, "hi": now + bound})))
        )
        lo = now + bound
    found.expiry["longer"] = int(_one((yield Stmt(q.expiring_later, {**p, "lo": lo}))))
    found.expiry["expired"] = int(_one((yield Stmt(q.expired, p))))
    for scope, n in (yield Stmt(q.never, p)).rows:
        found.no_expiry_by_scope[_text(scope)] = int(n)
    found.expiry["never"] = sum(found.no_expiry_by_scope.values())


def purge_older(
    s: Statements,
    age: float,
    limit: int | None,
    sweep: Sweep[tuple[str, str]],
    batch: int = PURGE_BATCH,
) -> Op[int]:
    """Delete finished records last written more than ``age`` seconds ago, in ranges of the
    primary key (``ops.walk_keys``): a limited purge goes on where the last one stopped."""
    q = queries(s)
    now = float((yield Stmt(q.clock, {"now": time.time()})).rows[0][0])
    cut = {"cutoff": now - age, "prefix": "", "plen": 0}
    return (yield from walk_keys(q.older_keys, q.purge_older, lambda: cut, limit, batch, sweep))


def _text(value: Any) -> str:
    return (
        bytes(value).decode() if isinstance(value, (bytes, bytearray, memoryview)) else str(value)
    )
