"""The audit page over memory, SQLite, PostgreSQL and MariaDB: every action done from the
dashboard is a row beside the tables it acted on (the record store's for resolve, release and
reconcile, the outbox's for requeue), listed newest first by keyset with exact filters; an
action refused (409) adds none."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from mideng.dashboard import app
from tests.dashboard.client import Client
from tests.dashboard.data import Seeded
from tests.dashboard.forms import form_fields

ORIGIN = {"origin": "http://127.0.0.1"}
FAMILIES = ("memory", "sqlite", "postgresql", "mysql")
RECORDS = 3


@pytest.fixture
def client(filled: Seeded) -> Iterator[Client]:
    dashboard = app(
        filled.guard, filled.db_url, outbox_table=filled.outbox_table, actions=True, page_size=2
    )
    with Client(dashboard) as c:
        yield c
        c.run(dashboard.aclose())
        c.run(filled.store.aclose())


def _act(c: Client, page: str, form_id: str, action: str, confirm: str, **more: str) -> int:
    shown = c.get(page)
    assert shown.status_code == 200, shown.text[:300]
    fields = {**form_fields(shown.text, form_id), **more, "confirm": confirm}
    return c.post(f"/actions/{action}", data=fields, headers=ORIGIN).status_code


def _rows(page: str) -> list[list[str]]:
    table = re.search(r'<table id="audit">.*?<tbody>(.*?)</tbody>', page, re.S)
    assert table is not None
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in rows]
    return [[re.sub(r"<[^>]+>", "", c) for c in row] for row in cells if len(row) == 6]


def _next(page: str) -> str | None:
    found = re.search(r'id="next" href="([^"]*)"', page)
    return None if found is None else found.group(1).replace("&amp;", "&")


def test_each_action_is_one_row_listed_newest_first_by_keyset(
    client: Client, filled: Seeded
) -> None:
    charge, job = filled.scope("charge"), filled.scope("job")
    assert _rows(client.get("/audit").text) == []
    c1 = f"/record?scope={charge}&key=c1"
    assert _act(client, c1, "resolve", "resolve", "c1", outcome="failed") == 200
    assert _act(client, f"/record?scope={charge}&key=c2", "release", "release", "c2") == 200
    stale = client.get(f"/record?scope={job}&key=stuck-1").text
    assert _act(client, f"/record?scope={job}&key=stuck-1", "release", "release", "stuck-1") == 200
    # The page seen before that release, acted on again: 409, and no row for it.
    fields = {**form_fields(stale, "release"), "confirm": "stuck-1"}
    assert client.post("/actions/release", data=fields, headers=ORIGIN).status_code == 409
    first = client.get("/audit")
    assert first.status_code == 200
    rows = _rows(first.text)
    assert [(r[1], r[2], r[3]) for r in rows] == [
        ("local operator", "release", f"{job}:stuck-1"),
        ("local operator", "release", f"{charge}:c2"),
    ]
    assert rows[0][5] == "released (deleted)"
    link = _next(first.text)
    assert link is not None
    rest = _rows(client.get(link).text)
    assert [(r[2], r[3]) for r in rest] == [("resolve", f"{charge}:c1")]
    assert rest[0][4].startswith("unknown (fence ")
    assert rest[0][5].startswith("failed (fence ")
    assert _next(client.get(link).text) is None
    only = _rows(client.get("/audit?action=resolve").text)
    assert [r[3] for r in only] == [f"{charge}:c1"]
    assert _rows(client.get(f"/audit?target={charge}:c2").text)[0][2] == "release"
    assert _rows(client.get("/audit?operator=someone").text) == []


def test_requeues_are_rows_of_the_outbox_audit(client: Client, filled: Seeded) -> None:
    for row_id in filled.dead_ids[:2]:
        assert _act(client, f"/outbox/row?id={row_id}", "requeue", "requeue", row_id) == 200
    rows = _rows(client.get("/audit?of=outbox").text)
    assert [r[3] for r in rows] == [f"outbox row {i}" for i in reversed(filled.dead_ids[:2])]
    assert rows[0][4] == "dead after 5 attempts"
    assert rows[0][5] == "pending again"
    assert _rows(client.get("/audit?of=records").text) == []


def test_a_bad_position_or_filter_is_a_400(client: Client) -> None:
    assert client.get("/audit?after=%%%").status_code == 400
    assert client.get("/audit?action=delete").status_code == 400
    assert client.get("/audit?of=elsewhere").status_code == 400
