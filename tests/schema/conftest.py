"""A database per test for the schema tests: SQLite, PostgreSQL or MariaDB, with record and
outbox table names of its own, and what mideng 0.1.0 left in such a database (``data/``)."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from tests.services import sql_url

DATA = Path(__file__).parent / "data"
FAMILIES = ("sqlite", "postgresql", "mysql")
#: The names the 0.1.0 data files use, replaced by each test's own.
OLD_RECORDS, OLD_OUTBOX = "mideng_records", "mideng_outbox"


@dataclass
class Db:
    family: str
    url: str  # SQLAlchemy's form; the stores, the relay and mideng migrate all take it
    records: str
    outbox: str
    engine: Engine

    @property
    def tables(self) -> list[str]:
        return [self.records, f"{self.records}_steps", self.outbox, f"{self.outbox}_keys"]

    def run(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        with self.engine.begin() as conn:
            result = conn.execute(text(sql), params or {})
            return list(result) if result.returns_rows else []

    def versions(self, component: str = "records", name: str | None = None) -> list[int]:
        name = name or (self.records if component == "records" else self.outbox)
        try:
            rows = self.run(
                "SELECT version FROM mideng_schema WHERE component = :c AND name = :n "
                "ORDER BY version",
                {"c": component, "n": name},
            )
        except Exception:  # no version table at all
            return []
        return [int(row[0]) for row in rows]

    def renamed(self, sql: str) -> str:
        return sql.replace(OLD_RECORDS, self.records).replace(OLD_OUTBOX, self.outbox)

    def old_statements(self) -> list[str]:
        """The DDL mideng 0.1.0 ran, with this test's table names."""
        return [self.renamed(statement) for statement in old_ddl(self.family)]

    def load_0_1_0(self) -> None:
        """The tables mideng 0.1.0 made, holding the rows its API wrote (see data/capture.py)."""
        rows = json.loads((DATA / f"v0.1.0-{self.family}.json").read_text())
        names = {
            "records": self.records,
            "steps": f"{self.records}_steps",
            "outbox": self.outbox,
            "outbox_keys": f"{self.outbox}_keys",
        }
        quote = self.engine.dialect.identifier_preparer.quote
        with self.engine.begin() as conn:
            for statement in self.old_statements():
                conn.exec_driver_sql(statement)
            for role, table in names.items():
                for row in rows[role]:
                    values = {k: _value(v) for k, v in row.items()}
                    columns = ", ".join(quote(k) for k in values)
                    binds = ", ".join(f":{k}" for k in values)
                    conn.execute(text(f"INSERT INTO {table} ({columns}) VALUES ({binds})"), values)

    def drop(self) -> None:
        with contextlib.suppress(Exception), self.engine.begin() as conn:
            for table in self.tables:
                conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
            if self.family == "postgresql":
                conn.execute(text(f"DROP FUNCTION IF EXISTS {self.outbox}_notify()"))
        with contextlib.suppress(Exception), self.engine.begin() as conn:  # no version table
            for name in (self.records, self.outbox):
                conn.execute(text("DELETE FROM mideng_schema WHERE name = :n"), {"n": name})
        self.engine.dispose()


def old_ddl(family: str) -> list[str]:
    """The DDL mideng 0.1.0 ran on ``family``, under its default table names."""
    script = (DATA / f"v0.1.0-{family}.sql").read_text()
    body = "\n".join(line for line in script.splitlines() if not line.startswith("--"))
    statements = (statement.strip().removesuffix(";") for statement in body.split(";\n"))
    return [statement for statement in statements if statement]


def _value(value: Any) -> Any:
    if isinstance(value, dict):
        return bytes.fromhex(value["hex"])
    return value


def open_db(family: str, tmp_path: Path) -> Db:
    url = sql_url(family, tmp_path / "schema.db")
    suffix = uuid.uuid4().hex[:10]
    return Db(family, url, f"rec_{suffix}", f"obx_{suffix}", create_engine(url))


@pytest.fixture(params=FAMILIES)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    handle = open_db(request.param, tmp_path)
    yield handle
    handle.drop()


@pytest.fixture(params=("postgresql", "mysql"))
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    handle = open_db(request.param, tmp_path)
    yield handle
    handle.drop()
