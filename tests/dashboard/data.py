"""A store and an outbox seeded with every kind of thing the dashboard shows, on fresh tables
of SQLite, PostgreSQL or MariaDB (or the memory store): succeeded records holding a secret
field, one whose result holds a ``<script>``, UNKNOWN ones, one whose lease ran out, a failed
one; outbox rows pending, sent and dead."""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import create_engine, text

from mideng.context import request_id_scope
from mideng.core.record import ClaimRequest, ExpiryPolicy
from mideng.errors import UnresolvedError
from mideng.guard import Guard
from mideng.outbox import Outbox
from mideng.stores.base import Store
from mideng.stores.registry import open_store
from tests.services import MYSQL_URL, POSTGRES_URL, need

XSS = "<script>alert('owned')</script>"
SECRET = "hunter2-secret-value"
PAGE_RECORDS = 120


@dataclass
class Seeded:
    family: str
    store_url: str
    db_url: str | None
    table: str
    outbox_table: str
    store: Store
    guard: Guard
    prefix: str
    dead_ids: list[str] = field(default_factory=list)
    pending_ids: list[str] = field(default_factory=list)

    def scope(self, name: str) -> str:
        return f"{self.prefix}_{name}"

    def row_state(self, row_id: str) -> tuple[int, int]:
        """An outbox row's state and attempts, read from its table."""
        assert self.db_url is not None
        engine = create_engine(self.db_url)
        with engine.connect() as connection:
            state, attempts = connection.execute(
                text(f"SELECT state, attempts FROM {self.outbox_table} WHERE id = :id"),
                {"id": row_id},
            ).one()
        engine.dispose()
        return int(state), int(attempts)

    def close(self) -> None:
        self.store.close()
        if self.db_url is not None:
            engine = create_engine(self.db_url)
            with contextlib.suppress(Exception), engine.begin() as connection:
                if self.family in ("postgresql", "mysql"):  # the store's tables on the server
                    for table in (self.table, f"{self.table}_steps", f"{self.table}_audit"):
                        connection.execute(text(f"DROP TABLE IF EXISTS {table}"))
                connection.execute(text(f"DROP TABLE IF EXISTS {self.outbox_table}"))
                connection.execute(text(f"DROP TABLE IF EXISTS {self.outbox_table}_keys"))
                connection.execute(text(f"DROP TABLE IF EXISTS {self.outbox_table}_audit"))
                if self.family == "postgresql":
                    connection.execute(
                        text(f"DROP FUNCTION IF EXISTS {self.outbox_table}_notify()")
                    )
            engine.dispose()


def urls(family: str, tmp_path: Path, table: str) -> tuple[str, str | None]:
    if family == "memory":
        return "memory://", f"sqlite:///{tmp_path / 'outbox.db'}"
    if family == "sqlite":
        records = tmp_path / "records.db"
        return f"sqlite:///{records}?table={table}", f"sqlite:///{records}"
    need(family)
    server = POSTGRES_URL if family == "postgresql" else MYSQL_URL
    return f"{server}?table={table}", server


def seeded(family: str, tmp_path: Path, *, records: int = PAGE_RECORDS) -> Seeded:
    """A fresh store and outbox of ``family``, filled (module docstring)."""
    tag = uuid.uuid4().hex[:8]
    table, outbox_table = f"dash_r_{tag}", f"dash_o_{tag}"
    store_url, db_url = urls(family, tmp_path, table)
    store = open_store(store_url)
    guard = Guard(store)
    found = Seeded(family, store_url, db_url, table, outbox_table, store, guard, f"d{tag}")
    fill_records(found, records)
    if db_url is not None:
        fill_outbox(found)
    return found


def fill_records(s: Seeded, count: int) -> None:
    pay, xss, charge, job = s.scope("pay"), s.scope("xss"), s.scope("charge"), s.scope("job")
    for n in range(count):
        with request_id_scope(f"req-{s.prefix}-{n % 7}"):
            s.guard.run(pay, f"order-{n:04d}", lambda: {"ok": True, "password": SECRET})
    s.guard.run(xss, "x1", lambda: {"html": XSS})
    s.guard.configure_scope(charge, on_expiry="unknown")
    for key in ("c1", "c2"):
        s.store.claim(
            ClaimRequest(charge, key, uuid.uuid4().hex, 0.2, 3600.0, None, ExpiryPolicy.UNKNOWN)
        )
    s.store.claim(ClaimRequest(job, "stuck-1", uuid.uuid4().hex, 0.2, 3600.0))
    time.sleep(0.3)
    for key in ("c1", "c2"):
        with contextlib.suppress(UnresolvedError):
            s.guard.run(charge, key, lambda: None)


def fill_outbox(s: Seeded) -> None:
    assert s.db_url is not None
    engine = create_engine(s.db_url)
    outbox = Outbox(engine, table=s.outbox_table)
    outbox.create_schema()
    with engine.begin() as connection:
        for n in range(30):
            row_id = outbox.add(
                connection, f"{s.prefix}.orders", {"n": n, "token": SECRET}, key=f"o{n % 3}"
            )
            (s.dead_ids if n < 3 else s.pending_ids).append(row_id)
        for _ in range(5):
            outbox.add(connection, f"{s.prefix}.mail", {"to": XSS})
    with engine.begin() as connection:
        for row_id in s.dead_ids:
            connection.execute(
                text(
                    f"UPDATE {s.outbox_table} SET state = 2, attempts = 5, "
                    "last_error = :error WHERE id = :id"
                ),
                {"id": row_id, "error": f"broker said {XSS}"},
            )
    engine.dispose()
