"""Transactional blocks are counted and traced like guarded calls, on PostgreSQL, MariaDB and
SQLite, sync and async: a scripted run, then a scrape of exactly its counts and the spans."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine

from mideng import Guard, open_store
from mideng.core.record import ClaimRequest
from mideng.db.dialect import kind_of
from mideng.errors import InProgressError, PayloadMismatchError
from mideng.observability import tracing
from tests.observability.otel import MemoryTracerProvider, RefusingTracerProvider
from tests.observability.scrape import series
from tests.services import MYSQL_URL, POSTGRES_URL, need

pytestmark = pytest.mark.slow
SCOPE = "tx_pay"


@dataclass
class Db:
    url: str
    aurl: str
    table: str
    engine: Engine
    guard: Guard
    kind: str  # the store label the block's statements are counted under


def _urls(name: str, tmp: Path) -> tuple[str, str]:
    if name == "postgresql":
        return POSTGRES_URL, POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://")
    if name == "mysql":
        return MYSQL_URL, MYSQL_URL.replace("+pymysql", "+asyncmy")
    path = tmp / "tx.db"
    return f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}"


@pytest.fixture(params=["postgresql", "mysql", "sqlite"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    name = str(request.param)
    if name != "sqlite":
        need(name)
    url, aurl = _urls(name, tmp_path)
    table = f"mideng_txm_{uuid.uuid4().hex[:10]}"
    store = open_store(url, table=table)
    engine = create_engine(url)
    with engine.connect() as conn:
        kind = kind_of(conn.dialect)
    yield Db(url, aurl, table, engine, Guard(store, lease=30), kind)
    store.close()
    if name != "sqlite":
        with engine.begin() as conn:
            conn.execute(text(f"DROP TABLE {table}"))
    engine.dispose()


def hold(db: Db, key: str) -> None:
    """A live claim on ``key`` by a store nobody observes: the block meets it in progress."""
    other = open_store(db.url, table=db.table)
    claim = other.claim(ClaimRequest(SCOPE, key, "holder", 30.0, 3600.0))
    assert claim.outcome.value == "acquired"
    other.close()


def script(db: Db, run: Any) -> None:
    """3 first blocks, 4 replays, 2 mismatches, 1 rolled back and run again, 1 in progress,
    1 whose claim statement fails. ``run(key, payload, fail, table)`` runs one block."""
    for n in range(3):
        assert run(f"k{n}", {"n": n}) == (False, n)
    for n in (0, 1, 2, 0):
        assert run(f"k{n}", {"n": n}) == (True, n)
    for _ in range(2):
        with pytest.raises(PayloadMismatchError):
            run("k1", {"n": "other"})
    with pytest.raises(RuntimeError, match="declined"):
        run("k3", {"n": 3}, fail=True)
    assert run("k3", {"n": 3}) == (False, 3)
    hold(db, "k4")
    with pytest.raises(InProgressError):
        run("k4", {"n": 4})
    with pytest.raises(DBAPIError, match="mideng_no_such_table"):
        run("k5", {"n": 5}, table="mideng_no_such_table")


def expect_counts(registry: CollectorRegistry, kind: str) -> None:
    assert series(registry, "mideng_claims_total") == {
        (("outcome", "acquired"), ("scope", SCOPE)): 5,
        (("outcome", "replay"), ("scope", SCOPE)): 4,
        (("outcome", "mismatch"), ("scope", SCOPE)): 2,
        (("outcome", "in_progress"), ("scope", SCOPE)): 1,
    }
    assert series(registry, "mideng_store_errors_total") == {
        (("operation", "claim"), ("store", kind)): 1
    }
    assert series(registry, "mideng_takeovers_total") == {}
    # Four blocks stored a result: their bodies and their completions were timed.
    assert series(registry, "mideng_body_seconds_count") == {(("scope", SCOPE),): 4}
    calls = series(registry, "mideng_store_call_seconds_count")
    assert calls == {
        (("operation", "claim"), ("scope", SCOPE)): 12,
        (("operation", "complete"), ("scope", SCOPE)): 4,
    }


def test_blocks_are_counted(db: Db, registry: CollectorRegistry) -> None:
    def run(key: str, payload: Any, fail: bool = False, table: str | None = None) -> Any:
        with db.engine.connect() as conn:
            options = {} if table is None else {"table": table}
            with db.guard.transaction(conn, SCOPE, key, payload=payload, **options) as tx:
                if tx.replayed:
                    return True, tx.result
                if fail:
                    raise RuntimeError("declined")
                tx.set_result(payload["n"])
        return False, payload["n"]

    script(db, run)
    expect_counts(registry, db.kind)


@pytest.fixture
async def aengine(db: Db) -> AsyncIterator[Any]:
    engine = create_async_engine(db.aurl)
    yield engine
    await engine.dispose()


@pytest.mark.anyio
async def test_async_blocks_are_counted(db: Db, aengine: Any, registry: CollectorRegistry) -> None:
    async def block(key: str, payload: Any, fail: bool, table: str | None) -> Any:
        async with aengine.connect() as conn:
            options = {} if table is None else {"table": table}
            async with db.guard.atransaction(conn, SCOPE, key, payload=payload, **options) as tx:
                if tx.replayed:
                    return True, tx.result
                if fail:
                    raise RuntimeError("declined")
                tx.set_result(payload["n"])
        return False, payload["n"]

    await scripted_async(db, block)
    expect_counts(registry, db.kind)


async def scripted_async(db: Db, block: Any) -> None:
    """``script`` with awaited blocks."""
    for n in range(3):
        assert await block(f"k{n}", {"n": n}, False, None) == (False, n)
    for n in (0, 1, 2, 0):
        assert await block(f"k{n}", {"n": n}, False, None) == (True, n)
    for _ in range(2):
        with pytest.raises(PayloadMismatchError):
            await block("k1", {"n": "other"}, False, None)
    with pytest.raises(RuntimeError, match="declined"):
        await block("k3", {"n": 3}, True, None)
    assert await block("k3", {"n": 3}, False, None) == (False, 3)
    hold(db, "k4")
    with pytest.raises(InProgressError):
        await block("k4", {"n": 4}, False, None)
    with pytest.raises(DBAPIError, match="mideng_no_such_table"):
        await block("k5", {"n": 5}, False, "mideng_no_such_table")


def test_a_block_is_one_span_with_a_child_per_statement(
    db: Db, spans: MemoryTracerProvider
) -> None:
    from opentelemetry import trace

    inside: list[object] = []
    with (
        db.engine.connect() as conn,
        db.guard.transaction(conn, SCOPE, "s1", payload={"n": 1}) as tx,
    ):
        inside.append(trace.get_current_span())
        tx.set_result(1)
    with (
        db.engine.connect() as conn,
        db.guard.transaction(conn, SCOPE, "s1", payload={"n": 1}) as tx,
    ):
        assert tx.replayed
    with (
        db.engine.connect() as conn,
        pytest.raises(PayloadMismatchError),
        db.guard.transaction(conn, SCOPE, "s1", payload={"n": 2}),
    ):
        pass

    blocks = spans.named("mideng.transaction")
    assert len(blocks) == 3
    assert all(s.ended and s.parent is None for s in blocks)
    first, replay, mismatch = blocks
    assert inside == [first]  # the block's own work runs inside its span
    assert first.attributes["mideng.scope"] == SCOPE
    assert first.attributes["mideng.store"] == db.kind
    assert first.attributes["mideng.outcome"] == "acquired"
    assert first.attributes["mideng.replayed"] is False
    assert first.attributes["mideng.fence"] == 1
    assert replay.attributes["mideng.outcome"] == "replay"
    assert replay.attributes["mideng.replayed"] is True
    assert mismatch.attributes["mideng.outcome"] == "mismatch"
    assert mismatch.status.status_code is StatusCode.ERROR
    assert [type(e) for e in mismatch.exceptions] == [PayloadMismatchError]
    children = [s for s in spans.spans if s.name.startswith("mideng.store.")]
    by_parent = {
        b.context.span_id: [c.name for c in children if c.parent == b.context] for b in blocks
    }
    assert by_parent == {
        first.context.span_id: ["mideng.store.claim", "mideng.store.complete"],
        replay.context.span_id: ["mideng.store.claim"],
        mismatch.context.span_id: ["mideng.store.claim"],
    }
    assert all(c.attributes["mideng.store"] == db.kind for c in children)


def test_a_failing_statement_is_recorded_on_its_span(db: Db, spans: MemoryTracerProvider) -> None:
    with (
        db.engine.connect() as conn,
        pytest.raises(DBAPIError, match="mideng_no_such_table"),
        db.guard.transaction(conn, SCOPE, "s2", table="mideng_no_such_table"),
    ):
        pass
    (claim,) = spans.named("mideng.store.claim")
    (block,) = spans.named("mideng.transaction")
    assert claim.status.status_code is StatusCode.ERROR
    assert block.status.status_code is StatusCode.ERROR
    assert len(claim.exceptions) == 1


@pytest.mark.parametrize(
    "target",
    [
        ("mideng.transaction", "attributes"),
        ("mideng.store.complete", "start"),
        ("mideng.store.complete", "end"),
        ("mideng.transaction", "end"),
    ],
    ids="-".join,
)
def test_a_span_that_fails_never_fails_the_block(db: Db, target: tuple[str, str]) -> None:
    provider = RefusingTracerProvider()
    tracing.enable(provider)
    provider.target = target
    with (
        db.engine.connect() as conn,
        db.guard.transaction(conn, SCOPE, "s3", payload={"n": 3}) as tx,
    ):
        tx.set_result(3)
    assert provider.refused == 1
    with (
        db.engine.connect() as conn,
        db.guard.transaction(conn, SCOPE, "s3", payload={"n": 3}) as tx,
    ):
        assert tx.replayed  # the block committed with its record
        assert tx.result == 3
