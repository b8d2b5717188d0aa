"""The listing capability on every store family: pages by keyset that together hold each
record once, in order; filters; the open statuses by lease; request ids; the last hour's
outcomes; and on PostgreSQL and SQLite, each page's statement walks an index (EXPLAIN)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from mideng.db.statements import Res
from mideng.stores.record_table.survey import list_records
from mideng.stores.survey import ListingStore, Position, RecordQuery
from tests.dashboard.data import PAGE_RECORDS, Seeded, seeded

FAMILIES = ("memory", "sqlite", "postgresql", "mysql")


@pytest.fixture(params=FAMILIES)
def filled(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Seeded]:
    s = seeded(request.param, tmp_path)
    yield s
    s.close()


def _listing(s: Seeded) -> ListingStore:
    assert isinstance(s.store, ListingStore)
    return s.store


def _walk(store: ListingStore, query: RecordQuery) -> list[tuple[str, str]]:
    """Every page of ``query`` by keyset, in order."""
    seen: list[tuple[str, str]] = []
    after = None
    while True:
        page = store.list_records(RecordQuery(query.scope, query.status, after, query.limit))
        seen += [(r.scope, r.key) for r in page]
        if len(page) < query.limit:
            return seen
        after = Position.after(page[-1])


def test_pages_by_keyset_hold_each_record_once_in_order(filled: Seeded) -> None:
    store = _listing(filled)
    pay = filled.scope("pay")
    keys = _walk(store, RecordQuery(pay, limit=17))
    assert keys == [(pay, f"order-{n:04d}") for n in range(PAGE_RECORDS)]
    every = [k for k in _walk(store, RecordQuery(limit=13)) if k[0].startswith(filled.prefix)]
    assert every == sorted(every)
    assert len(every) == PAGE_RECORDS + 4  # the xss record, two UNKNOWN, one stuck


def test_status_filters_and_the_open_statuses_by_lease(filled: Seeded) -> None:
    store = _listing(filled)
    unknown = [
        k
        for k in _walk(store, RecordQuery(status="unknown", limit=1))
        if k[0].startswith(filled.prefix)
    ]
    assert unknown == [(filled.scope("charge"), "c1"), (filled.scope("charge"), "c2")]
    processing = store.list_records(RecordQuery(filled.scope("job"), "processing"))
    assert [r.key for r in processing] == ["stuck-1"]
    assert store.list_records(RecordQuery(filled.scope("pay"), "unknown")) == []


def test_request_ids_and_outcomes(filled: Seeded) -> None:
    store = _listing(filled)
    found = store.with_request_id(f"req-{filled.prefix}-3", limit=100)
    assert {r.key for r in found} == {f"order-{n:04d}" for n in range(3, PAGE_RECORDS, 7)}
    since = time.time() - 3600
    counts = store.outcomes(since, 300).counts
    assert sum(n for _, status, n in counts if status == "succeeded") >= PAGE_RECORDS + 1
    assert all(0 <= bucket < 13 for bucket, _, _ in counts)


def test_async_twins_answer_the_same(filled: Seeded) -> None:
    store = _listing(filled)
    query = RecordQuery(
        filled.scope("pay"), "succeeded", Position(filled.scope("pay"), "order-0010"), 5
    )

    async def both() -> tuple[list[str], list[str], int]:
        page = await store.alist_records(query)
        rid = await store.awith_request_id(f"req-{filled.prefix}-1", 3)
        outcomes = await store.aoutcomes(time.time() - 60, 60)
        return [r.key for r in page], [r.key for r in rid], len(outcomes.counts)

    keys, rid, n = asyncio.run(both())
    assert keys == [f"order-{n:04d}" for n in range(11, 16)]
    assert keys == [r.key for r in store.list_records(query)]
    assert len(rid) == 3
    assert n >= 1


# -- every page's statement walks an index --------------------------------------------------
PAGES = (
    RecordQuery(),
    RecordQuery("s"),
    RecordQuery("s", "succeeded"),
    RecordQuery(None, "unknown"),
    RecordQuery(None, "processing"),
)


def _statements(family: str, table: str) -> list[tuple[RecordQuery, str, dict[str, object]]]:
    from mideng.stores.record_table.statements import Statements

    s = Statements(family, table)
    found = []
    for query in PAGES:
        op = list_records(s, RecordQuery(query.scope, query.status, Position("a", "b", 1.0)))
        next(op)
        stmt = op.send(Res(1, [[time.time()]]))
        found.append((query, stmt.sql.text, dict(stmt.params or {})))
    return found


@pytest.mark.parametrize("family", ["sqlite", "postgresql"])
def test_every_page_walks_an_index(family: str, tmp_path: Path) -> None:
    s = seeded(family, tmp_path, records=10)
    try:
        engine = create_engine(s.db_url or "")
        explain = "EXPLAIN QUERY PLAN " if family == "sqlite" else "EXPLAIN "
        with engine.connect() as connection:
            if family == "postgresql":
                connection.execute(text("SET enable_seqscan = off"))
            for query, sql, params in _statements(family, s.table):
                plan = " ".join(
                    str(row[-1]) for row in connection.execute(text(explain + sql), params)
                )
                if family == "sqlite" and query.by_lease:
                    # Version 3's partial index of the unresolved records, by status and
                    # lease: in the page's order, so no sort and no scan.
                    assert f"USING INDEX {s.table}_unresolved" in plan, (sql, plan)
                    assert "TEMP B-TREE" not in plan, (sql, plan)
                elif family == "sqlite":
                    assert "USING PRIMARY KEY" in plan, (sql, plan)
                else:
                    assert "Index" in plan, (sql, plan)
                    assert "Seq Scan" not in plan, (sql, plan)
        engine.dispose()
    finally:
        s.close()


def test_a_survey_without_its_spread_counts_the_same_statuses(filled: Seeded) -> None:
    from mideng.stores.survey import SurveyStore

    store = filled.store
    assert isinstance(store, SurveyStore)
    whole = store.survey(filled.prefix, grace=0.0, biggest=0)
    lean = store.survey(filled.prefix, grace=0.0, biggest=0, spread=False)
    assert lean.by_scope == whole.by_scope
    assert lean.stuck_count == whole.stuck_count == 1
    assert [s.key for s in lean.stuck] == ["stuck-1"]
    assert sum(whole.expiry.values()) > 0
    if filled.family in ("sqlite", "postgresql", "mysql"):  # the SQL table skips the counts
        assert sum(lean.expiry.values()) == 0


def test_a_page_of_one_scope_stays_in_it_from_another_scopes_position(filled: Seeded) -> None:
    store = _listing(filled)
    elsewhere = Position(filled.scope("aaa"), "order-0100")
    page = store.list_records(RecordQuery(filled.scope("pay"), None, elsewhere, 5))
    assert {r.scope for r in page} == {filled.scope("pay")}
    assert [r.key for r in page] == [f"order-{n:04d}" for n in range(101, 106)]


@pytest.mark.parametrize("family", ["sqlite", "postgresql"])
def test_the_lookup_by_request_id_reads_its_index(family: str, tmp_path: Path) -> None:
    """Records and outbox rows of a request id, found through the ``_request`` indexes of
    the audit migration, not by reading the tables."""
    from mideng.outbox.survey import Queries as OutboxQueries
    from mideng.stores.record_table.statements import Statements
    from mideng.stores.record_table.survey import queries

    s = seeded(family, tmp_path, records=10)
    try:
        engine = create_engine(s.db_url or "")
        explain = "EXPLAIN QUERY PLAN " if family == "sqlite" else "EXPLAIN "
        now = time.time()
        params = {"at": now, "now": now, "request_id": "r", "limit": 5, "prefix": "", "plen": 0}
        lookups = (
            (queries(Statements(family, s.table)).with_request_id.text, f"{s.table}_request"),
            (OutboxQueries(s.outbox_table).with_request_id.text, f"{s.outbox_table}_request"),
        )
        with engine.connect() as connection:
            if family == "postgresql":
                connection.execute(text("SET enable_seqscan = off"))
            for sql, index in lookups:
                rows = connection.execute(text(explain + sql), params)
                plan = " ".join(str(row[-1]) for row in rows)
                assert f"USING INDEX {index}" in plan or f"using {index}" in plan, (sql, plan)
        engine.dispose()
    finally:
        s.close()
