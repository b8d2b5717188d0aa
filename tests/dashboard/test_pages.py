"""Every page of the dashboard over a seeded store and outbox (memory, SQLite, PostgreSQL,
MariaDB), through the ASGI app mounted under a prefix: it loads, filters and pages by
keyset, finds things by exact lookup, shows what a store holds escaped and redacted, and
turns bad input into a 400 page, never a 500."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from mideng.dashboard import app
from tests.dashboard.client import Client
from tests.dashboard.data import PAGE_RECORDS, SECRET, Seeded, seeded

PREFIX = "/ops"
FAMILIES = ("memory", "sqlite", "postgresql", "mysql")


@pytest.fixture
def client(filled: Seeded) -> Iterator[Client]:
    dashboard = app(filled.guard, filled.db_url, outbox_table=filled.outbox_table, page_size=50)
    outer = Starlette(routes=[Mount(PREFIX, app=dashboard)])
    with Client(outer, base_url="http://127.0.0.1") as c:
        yield c
        c.run(dashboard.aclose())
        c.run(filled.store.aclose())  # its async pool, on the loop that opened it


def _get(client: Client, path: str, status: int = 200) -> str:
    reply = client.get(PREFIX + path)
    assert reply.status_code == status, (path, reply.text[:500])
    return reply.text


def _links(page: str) -> list[tuple[str, str]]:
    found = re.findall(r'(href|src|action)="([^"]*)"', page)
    return [(attribute, link.replace("&amp;", "&")) for attribute, link in found]


def test_every_page_loads_and_every_link_stays_under_the_prefix(
    client: Client, filled: Seeded
) -> None:
    pay = filled.scope("pay")
    pages = [
        "/",
        "/records",
        f"/records?scope={pay}",
        "/records?status=unknown",
        f"/record?scope={pay}&key=order-0001",
        "/outbox",
        "/outbox?state=dead",
        f"/outbox/row?id={filled.dead_ids[0]}",
        "/operations",
        f"/operation?scope={pay}&key=order-0001",
        f"/lookup?kind=request&q=req-{filled.prefix}-1",
        "/audit",
        "/audit?of=outbox",
    ]
    for path in pages:
        page = _get(client, path)
        for attribute, link in _links(page):
            assert link.startswith(PREFIX + "/"), (path, link)
            if attribute == "href":
                assert _get(client, link.removeprefix(PREFIX)) is not None


def test_overview_counts(client: Client, filled: Seeded) -> None:
    page = _get(client, "/")
    assert filled.scope("pay") in page
    assert "expired leases" in page
    assert re.search(r"<b>2</b> UNKNOWN", page)
    assert f"{filled.prefix}.orders" in page
    assert "<svg" in page
    assert "<rect" in page


def test_records_page_by_keyset_and_filter(client: Client, filled: Seeded) -> None:
    pay = filled.scope("pay")
    keys: list[str] = []
    path = f"/records?scope={pay}"
    while True:
        page = _get(client, path)
        keys += re.findall(r"key=(order-\d+)\">", page)
        after = re.search(r'id="next" href="/ops([^"]+)"', page)
        if after is None:
            break
        path = after.group(1).replace("&amp;", "&")
    assert keys == [f"order-{n:04d}" for n in range(PAGE_RECORDS)]
    unknown = _get(client, "/records?status=unknown")
    assert "c1" in unknown
    assert "c2" in unknown
    assert "order-0001" not in unknown


def test_outbox_pages_and_rows(client: Client, filled: Seeded) -> None:
    dead = _get(client, "/outbox?state=dead")
    assert all(row_id in dead for row_id in filled.dead_ids)
    assert filled.pending_ids[0] not in dead
    row = _get(client, f"/outbox/row?id={filled.dead_ids[0]}")
    assert "&lt;script&gt;" in row
    assert "<script>" not in row
    assert SECRET not in row


def test_lookups(client: Client, filled: Seeded) -> None:
    pay = filled.scope("pay")
    assert "order-0005" in _get(client, f"/lookup?kind=key&q={pay}:order-0005")
    assert filled.dead_ids[1] in _get(client, f"/lookup?kind=message&q={filled.dead_ids[1]}")
    found = _get(client, f"/lookup?kind=request&q=req-{filled.prefix}-3")
    assert "order-0003" in found
    assert "order-0010" in found
    assert "order-0004" not in found
    assert "No live record" in _get(client, f"/lookup?kind=key&q={pay}:nope")


def test_stored_markup_is_text_and_secrets_are_redacted(client: Client, filled: Seeded) -> None:
    page = _get(client, f"/record?scope={filled.scope('xss')}&key=x1")
    assert "<script>" not in page
    assert "&lt;script&gt;alert(" in page
    paid = _get(client, f"/record?scope={filled.scope('pay')}&key=order-0001")
    assert SECRET not in paid
    assert "***" in paid


@pytest.mark.parametrize(
    "path",
    [
        "/records?status=nope",
        "/records?after=%%%",
        "/records?after=WyJ4Il0",
        "/records?scope=" + "x" * 5000,
        "/record?scope=&key=",
        "/outbox?state=lost",
        "/lookup?kind=guess&q=1",
        "/lookup?q=",
        "/operation?key=1",
    ],
)
def test_bad_input_is_a_400_page(client: Client, path: str) -> None:
    page = _get(client, path, 400)
    assert "<script" not in page


def test_a_custom_redaction(filled: Seeded) -> None:
    dashboard = app(filled.guard, None, redact=[r'"ok": true'])
    with Client(dashboard, base_url="http://localhost") as c:
        page = c.get(f"/record?scope={filled.scope('pay')}&key=order-0001").text
        c.run(filled.store.aclose())
    assert SECRET in page  # the default rule is replaced, not added to
    assert "&#34;ok&#34;: true" not in page
    assert "&#34;***&#34;" in page


def test_a_store_that_does_not_list_still_has_its_overview() -> None:
    import uuid

    from mideng.guard import Guard
    from tests.services import REDIS_URL, need

    need("redis")
    guard = Guard(f"{REDIS_URL}?prefix=dash{uuid.uuid4().hex[:8]}")
    guard.run("dash_redis", "k1", lambda: 1)
    dashboard = app(guard, None)
    try:
        with Client(dashboard) as c:
            overview = c.get("/")
            assert overview.status_code == 200
            assert "this store does not list its records" in overview.text
            assert "dash_redis" in overview.text
            listed = c.get("/records")
            assert listed.status_code == 400
            assert "does not list its records" in listed.text
            assert c.get("/record?scope=dash_redis&key=k1").status_code == 200
            c.run(guard.aclose())
    finally:
        guard.close()


def test_the_command_serves_the_pages(tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    import httpx

    from tests.dashboard.browser import free_port

    s = seeded("sqlite", tmp_path, records=2)
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mideng",
            "dashboard",
            "--store",
            s.store_url,
            "--db",
            s.db_url or "",
            "--outbox-table",
            s.outbox_table,
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                reply = httpx.get(f"http://127.0.0.1:{port}/outbox?state=dead", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the command did not serve"
                assert server.poll() is None, server.stdout.read() if server.stdout else ""
                time.sleep(0.1)
        assert reply.status_code == 200
        assert s.dead_ids[0] in reply.text
        assert "read-only" in reply.text
    finally:
        server.terminate()
        server.wait(20)
        if server.stdout is not None:
            server.stdout.close()
        s.close()


def test_an_outbox_database_that_is_not_there_is_a_503_page(tmp_path: Path) -> None:
    from mideng.guard import Guard

    guard = Guard("memory://")
    dashboard = app(guard, f"sqlite:///{tmp_path / 'empty.db'}", outbox_table="absent_outbox")
    with Client(dashboard) as c:
        for path in ("/", "/outbox", "/outbox/row?id=x"):
            reply = c.get(path)
            assert reply.status_code == 503, path
            assert "outbox" in reply.text
        c.run(dashboard.aclose())


class Declined(Exception):
    pass


def test_the_operations_page_pages_by_keyset(filled: Seeded) -> None:
    scope = filled.scope("op")

    @filled.guard.step("charge")
    def charge(order: str) -> str:
        raise Declined(order)

    @filled.guard.operation(scope, key="{order}", steps=("charge",))
    def pay(order: str) -> str:
        return charge(order)

    for n in range(5):
        with pytest.raises(Declined):
            pay(f"o{n}")
    dashboard = app(filled.guard, filled.db_url, outbox_table=filled.outbox_table, page_size=2)
    with Client(dashboard) as c:
        keys: list[str] = []
        path: str | None = f"/operations?scope={scope}"
        while path is not None:
            page = c.get(path)
            assert page.status_code == 200, page.text[:300]
            keys.extend(re.findall(r'&amp;key=(o\d)"', page.text))
            found = re.search(r'id="next" href="([^"]*)"', page.text)
            path = None if found is None else found.group(1).replace("&amp;", "&")
        assert c.get("/operations?after=WzFd").status_code == 400
        c.run(dashboard.aclose())
        c.run(filled.store.aclose())
    assert keys == [f"o{n}" for n in range(5)]
