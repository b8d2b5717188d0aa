"""A read-only dashboard needs no more than SELECT: every page loads on PostgreSQL as a role
granted SELECT only on the record, steps, outbox and audit tables (and the schema's version
table)."""

from __future__ import annotations

import uuid
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from mideng.dashboard import app
from tests.dashboard.client import Client
from tests.dashboard.data import seeded


def test_every_page_loads_as_a_select_only_role(tmp_path: Path) -> None:
    s = seeded("postgresql", tmp_path, records=60)
    role = f"dash_ro_{uuid.uuid4().hex[:8]}"
    assert s.db_url is not None
    admin = create_engine(s.db_url)
    tables = [s.table, f"{s.table}_steps", s.outbox_table, f"{s.outbox_table}_keys"]
    tables += [f"{s.table}_audit", f"{s.outbox_table}_audit"]
    try:
        with admin.begin() as connection:
            connection.execute(text(f"CREATE ROLE {role} LOGIN"))
            for table in [*tables, "mideng_schema"]:
                connection.execute(text(f"GRANT SELECT ON {table} TO {role}"))
        url = make_url(s.db_url).set(username=role).render_as_string(hide_password=False)
        store_url = f"{url}?table={s.table}"
        dashboard = app(store_url, url, outbox_table=s.outbox_table)
        pay = s.scope("pay")
        with Client(dashboard) as c:
            for path in (
                "/",
                "/records",
                f"/records?scope={pay}&status=succeeded",
                "/records?status=processing",
                f"/record?scope={pay}&key=order-0003",
                "/outbox?state=dead",
                f"/outbox/row?id={s.dead_ids[0]}",
                "/operations",
                f"/lookup?kind=request&q=req-{s.prefix}-2",
                "/audit",
                "/audit?of=outbox",
            ):
                reply = c.get(path)
                assert reply.status_code == 200, (path, reply.text[:300])
            assert "order-0003" in c.get(f"/records?scope={pay}").text
    finally:
        with admin.begin() as connection:
            for table in [*tables, "mideng_schema"]:
                connection.execute(text(f"REVOKE ALL ON {table} FROM {role}"))
            connection.execute(text(f"DROP ROLE IF EXISTS {role}"))
        admin.dispose()
        s.close()
