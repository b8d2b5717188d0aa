"""The outbox's operator reads on SQLite, PostgreSQL and MariaDB: the backlog per
destination, pages by keyset, one row, rows of a request id; sync and async alike; and on
PostgreSQL and SQLite the page statements walk the primary key (EXPLAIN)."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import text

from mideng.outbox.survey import OutboxSurvey, Queries, RowQuery
from tests.outbox.conftest import Db


def _fill(db: Db) -> tuple[list[str], list[str]]:
    with db.engine.begin() as connection:
        ids = [db.outbox.add(connection, "orders", {"n": n}, key=f"k{n % 4}") for n in range(25)]
        mail = [db.outbox.add(connection, "mail", {"n": n}) for n in range(3)]
    with db.engine.begin() as connection:
        connection.execute(
            text(
                f"UPDATE {db.table} SET state = 2, attempts = 4, last_error = 'no' WHERE id = :id"
            ),
            {"id": ids[0]},
        )
        connection.execute(
            text(f"UPDATE {db.table} SET state = 1, sent_at = 1 WHERE id = :id"), {"id": mail[0]}
        )
    return ids, mail


def test_backlog_pages_and_rows(db: Db) -> None:
    ids, mail = _fill(db)
    survey = OutboxSurvey(db.engine, db.table)
    backlog = {b.destination: b for b in survey.backlog()}
    assert backlog["orders"].pending == 24
    assert backlog["orders"].dead == 1
    assert backlog["mail"].pending == 2
    assert backlog["orders"].oldest_pending is not None
    assert backlog["orders"].oldest_pending <= time.time()
    seen: list[str] = []
    after = None
    while True:
        page = survey.rows(RowQuery(None, "orders", after, 7))
        seen += [r.id for r in page]
        if len(page) < 7:
            break
        after = page[-1].id
    assert seen == sorted(ids)
    dead = survey.rows(RowQuery("dead"))
    assert [(r.id, r.attempts, r.error) for r in dead] == [(ids[0], 4, "no")]
    assert [r.id for r in survey.rows(RowQuery("sent"))] == [mail[0]]
    row = survey.row(ids[3])
    assert row is not None
    assert row.payload is not None
    assert b'"n": 3' in row.payload or b'"n":3' in row.payload
    assert survey.row("no-such-id") is None
    assert survey.with_request_id("nobody") == []

    async def awaited() -> tuple[int, int, str | None]:
        try:
            backlog = await survey.abacklog()
            page = await survey.arows(RowQuery("pending", "orders", None, 100))
            row = await survey.arow(ids[3])
            return len(backlog), len(page), None if row is None else row.id
        finally:
            await survey.aclose()

    assert asyncio.run(awaited()) == (2, 24, ids[3])
    survey.close()


def test_pages_walk_the_primary_key(db: Db) -> None:
    if db.name == "mysql":
        return  # EXPLAIN is checked on PostgreSQL and SQLite
    _fill(db)
    q = Queries(db.table)
    explain = "EXPLAIN QUERY PLAN " if db.name == "sqlite" else "EXPLAIN "
    with db.engine.connect() as connection:
        if db.name == "postgresql":
            connection.execute(text("SET enable_seqscan = off"))
        for state in (None, 0, 1, 2):
            for by_destination in (False, True):
                sql = q.page(state, by_destination).text
                params = {"after": "", "limit": 5, "destination": "orders"}
                plan = " ".join(str(r[-1]) for r in connection.execute(text(explain + sql), params))
                assert "Seq Scan" not in plan, plan
                assert (
                    ("PRIMARY KEY" in plan or "INDEX" in plan)
                    if db.name == "sqlite"
                    else "Index" in plan
                ), plan
