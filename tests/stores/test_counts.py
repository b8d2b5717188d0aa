"""The survey of a big SQL table (``stores.record_table.survey``): processing, UNKNOWN and failed
records counted exactly through their indexes, succeeded ones estimated within a stated
tolerance and labelled so (``Survey.estimated``, ``stats`` text and ``--json``, the dashboard,
the gauges); ``--exact`` and a small table count every row. Each statement of the estimate is
shown by EXPLAIN to read an index (or, for the sample and SQLite's row count, what it says).

Tables of ``RECORDS`` records are filled by one bulk statement per database, above
``ESTIMATE_ABOVE`` so that ``mideng stats`` estimates them as it would a big table.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text

from mideng.cli import main
from mideng.dashboard import app
from mideng.stores.record_table.statements import Statements
from mideng.stores.record_table.survey import _NOT_RECORDS, queries
from mideng.stores.registry import open_store
from mideng.stores.survey import ESTIMATE_ABOVE, SurveyStore
from tests.dashboard.data import urls

RECORDS = 150_000
SCOPES = 10
#: Every record's relative error allowed for the estimated succeeded counts: PostgreSQL's sample
#: of 1,000 pages by scope, InnoDB's row count after ANALYZE TABLE, SQLite's count of the table
#: (off by the expired records not yet purged).
TOLERANCE = {"postgresql": 0.10, "mysql": 0.25, "sqlite": 0.05}
TOKENS = 40


def _status(i: int, now: float) -> tuple[str, float | None, float]:
    """Record ``i``'s status, lease and expiry (what ``_FILL`` writes)."""
    status, lease, expires = "succeeded", None, now + 86400
    if i % 101 == 0:
        status = "failed"
    elif i % 1009 == 1:
        status, lease = "processing", now + (600 if i % 2018 == 1 else -600)
    elif i % 5003 == 2:
        status = "unknown"
    if i % 211 == 3:
        expires = now - 100
    return status, lease, expires


_STATUS = (
    "CASE WHEN i % 101 = 0 THEN 'failed' WHEN i % 1009 = 1 THEN 'processing' "
    "WHEN i % 5003 = 2 THEN 'unknown' ELSE 'succeeded' END"
)
_LEASE = (
    "CASE WHEN i % 1009 = 1 AND i % 101 <> 0 THEN :now + "
    "CASE WHEN i % 2018 = 1 THEN 600 ELSE -600 END END"
)
_EXPIRES = "CASE WHEN i % 211 = 3 THEN :now - 100 ELSE :now + 86400 END"


def _fill(family: str, engine: Any, table: str, now: float) -> None:
    if family == "mysql":
        scope, key = f"concat('c', i % {SCOPES})", "concat('k', i)"
    else:
        scope, key = f"'c' || (i % {SCOPES})", "'k' || i"
    row = (
        f"{scope}, {key}, {_STATUS}, 1, 'o', NULL, {_LEASE}, NULL, NULL, NULL, 1, NULL, "
        f":now - (i % 7200), :now - (i % 7200), {_EXPIRES}"
    )
    if family == "postgresql":
        fill = f"INSERT INTO {table} SELECT {row} FROM generate_series(0, {RECORDS - 1}) AS g(i)"
    elif family == "mysql":
        fill = (
            f"INSERT INTO {table} SELECT {row} FROM (SELECT seq AS i FROM seq_0_to_{RECORDS - 1}) s"
        )
    else:
        fill = (
            f"INSERT INTO {table} WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c "
            f"WHERE i < {RECORDS - 1}) SELECT {row} FROM c"
        )
    tokens = (
        f"INSERT INTO {table} (scope, {'`key`' if family == 'mysql' else 'key'}, status, fence, "
        "owner, attempts, created_at, updated_at, expires_at) VALUES "
        + ", ".join(
            f"('token:c0', 't{n}', 'succeeded', 1, 'o', 1, :now, :now, :now + 60)"
            for n in range(TOKENS)
        )
    )
    with engine.begin() as conn:
        conn.execute(text(fill), {"now": now})
        conn.execute(text(tokens), {"now": now})
    if family == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f"VACUUM ANALYZE {table}"))
    elif family == "mysql":
        with engine.begin() as conn:
            conn.execute(text(f"ANALYZE TABLE {table}"))


def _expected(now: float) -> dict[str, dict[str, int]]:
    """Live records by scope and status, as an exact survey counts them."""
    found: dict[str, dict[str, int]] = {}
    for i in range(RECORDS):
        status, _, expires = _status(i, now)
        if expires > now:
            scope = found.setdefault(f"c{i % SCOPES}", {})
            scope[status] = scope.get(status, 0) + 1
    return found


@dataclass
class Big:
    family: str
    url: str
    db_url: str
    table: str
    now: float
    expected: dict[str, dict[str, int]]
    engine: Any

    @contextlib.contextmanager
    def opened(self) -> Iterator[SurveyStore]:
        store = open_store(self.url)
        try:
            assert isinstance(store, SurveyStore)
            yield store
        finally:
            store.close()


@pytest.fixture(scope="module", params=["sqlite", "postgresql", "mysql"])
def big(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Big]:
    family = request.param
    table = f"counts_{uuid.uuid4().hex[:8]}"
    url, db_url = urls(family, tmp_path_factory.mktemp(family), table)
    assert db_url is not None
    open_store(url).close()  # the tables, at this mideng's version
    engine = create_engine(db_url)
    now = time.time()
    _fill(family, engine, table, now)
    yield Big(family, url, db_url, table, now, _expected(now), engine)
    with engine.begin() as conn:
        for t in (table, f"{table}_steps"):
            conn.execute(text(f"DROP TABLE IF EXISTS {t}"))
    engine.dispose()


def _unresolved(by_scope: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {
        scope: {s: n for s, n in statuses.items() if s != "succeeded" and n}
        for scope, statuses in by_scope.items()
    }


def test_a_big_table_counts_the_unresolved_exactly_and_estimates_the_rest(big: Big) -> None:
    assert RECORDS > ESTIMATE_ABOVE
    with big.opened() as store:
        found = store.survey(None, grace=60.0, biggest=0, spread=False)
        exact = store.survey(None, grace=60.0, biggest=0, spread=False, exact=True)
    assert not exact.estimated
    assert not exact.unscoped
    assert exact.by_scope == big.expected
    assert found.estimated
    assert _unresolved(found.by_scope) == _unresolved(big.expected)
    assert found.stuck_count == exact.stuck_count > 0
    assert found.oldest_processing_since == exact.oldest_processing_since
    # The longest-waiting UNKNOWN record, by when it became UNKNOWN (written :now - i % 7200).
    waited = min(
        big.now - (i % 7200)
        for i in range(RECORDS)
        if _status(i, big.now)[0] == "unknown" and _status(i, big.now)[2] > big.now
    )
    assert found.oldest_unknown_since == exact.oldest_unknown_since == waited
    assert [s.key for s in found.stuck] == [s.key for s in exact.stuck]
    tolerance = TOLERANCE[big.family]
    succeeded = sum(s.get("succeeded", 0) for s in big.expected.values())
    assert abs(found.by_status()["succeeded"] - succeeded) <= tolerance * succeeded
    if big.family == "postgresql":  # sampled by scope
        assert not found.unscoped
        for scope, statuses in big.expected.items():
            n = statuses["succeeded"]
            assert abs(found.by_scope[scope]["succeeded"] - n) <= tolerance * n, scope
    else:  # the table's row count, not split by scope
        assert set(found.unscoped) == {"succeeded"}
        assert all("succeeded" not in s for s in found.by_scope.values())
    if big.family == "sqlite":  # the rows the triggers counted: off by the expired ones alone
        expired = RECORDS - sum(sum(s.values()) for s in big.expected.values())
        assert found.by_status()["succeeded"] == succeeded + expired


def test_a_prefix_or_the_spread_counts_every_row(big: Big) -> None:
    with big.opened() as store:
        spread = store.survey(None, grace=60.0, biggest=0)
        prefixed = store.survey("c1", grace=60.0, biggest=0, spread=False)
    assert not spread.estimated
    assert spread.by_scope == big.expected
    # A prefix: PostgreSQL samples the prefix's scopes; the others count it exactly.
    assert prefixed.estimated is (big.family == "postgresql")
    assert set(prefixed.by_scope) == {"c1"}
    assert _unresolved(prefixed.by_scope) == _unresolved({"c1": big.expected["c1"]})


def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def test_stats_labels_its_estimates_and_exact_counts_every_row(big: Big) -> None:
    done = _cli("stats", "--store", big.url, "--json")
    assert done.exit_code == 1, done.output  # stuck and UNKNOWN records
    told = json.loads(done.output)
    assert told["estimated"] is True
    assert told["estimated_statuses"] == ["succeeded"]
    assert told["unknown"] == sum(s.get("unknown", 0) for s in big.expected.values())
    assert told["by_status"]["failed"] == sum(s.get("failed", 0) for s in big.expected.values())
    exact = json.loads(_cli("stats", "--store", big.url, "--json", "--exact").output)
    assert exact["estimated"] is False
    assert exact["estimated_statuses"] == []
    assert exact["by_scope"] == big.expected
    assert exact["total"] == sum(sum(s.values()) for s in big.expected.values())
    shown = _cli("stats", "--store", big.url).output
    assert "estimated: succeeded" in shown
    assert "~" in shown
    assert "estimated" not in _cli("stats", "--store", big.url, "--exact").output


def test_the_overview_labels_its_estimates(big: Big) -> None:
    import asyncio

    async def page() -> str:
        dashboard = app(big.url)
        transport = httpx.ASGITransport(app=dashboard)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            reply = await client.get("/")
        await dashboard.aclose()
        assert reply.status_code == 200
        return reply.text

    shown = asyncio.run(page())
    assert "<small>estimated</small>" in shown
    assert "~ estimated: succeeded" in shown
    if big.family == "postgresql":  # the last hour's chart is sampled too
        assert "estimated from a sample of the table" in shown
    else:
        assert "(all scopes)" in shown


def test_the_gauges_say_the_counts_are_estimates(big: Big) -> None:
    prometheus = pytest.importorskip("prometheus_client")
    from mideng.observability import metrics

    registry = prometheus.CollectorRegistry()
    with big.opened() as store:
        gauges = metrics.watch_store(store, registry=registry, interval=0.0)
        assert registry.get_sample_value("mideng_records_estimated", {"store": gauges.name}) == 1
        unknown = sum(s.get("unknown", 0) for s in big.expected.values())
        got = [
            registry.get_sample_value(
                "mideng_records", {"store": gauges.name, "scope": scope, "status": "unknown"}
            )
            or 0
            for scope in big.expected
        ]
        assert sum(got) == unknown
        if big.family != "postgresql":
            labels = {"store": gauges.name, "scope": "*", "status": "succeeded"}
            assert (registry.get_sample_value("mideng_records", labels) or 0) > 0
        gauges.close()


# -- each statement of the estimate reads an index ---------------------------------------------
def _params(now: float) -> dict[str, Any]:
    return {
        "at": now,
        "cut": now - 60,
        "prefix": "",
        "plen": 0,
        "percent": 10.0,
        "limit": 5,
        **_NOT_RECORDS,
    }


def _plan(big: Big, sql: str) -> list[Any]:
    explain = {"sqlite": "EXPLAIN QUERY PLAN ", "postgresql": "EXPLAIN ", "mysql": "EXPLAIN "}
    with big.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(explain[big.family] + sql), _params(big.now))]


def test_the_estimate_reads_indexes_not_the_table(big: Big) -> None:
    t = big.table
    q = queries(Statements(big.family, t))
    if big.family == "postgresql":
        plans = {
            name: " ".join(str(r[0]) for r in _plan(big, getattr(q, name).text))
            for name in ("open_counts", "failed_counts", "succeeded", "stuck")
        }
        assert f"Index Scan using {t}_open" in plans["open_counts"] or (
            f"Bitmap Index Scan on {t}_open" in plans["open_counts"]
        ), plans
        assert f"Index Only Scan using {t}_failed" in plans["failed_counts"], plans
        assert "Sample Scan" in plans["succeeded"], plans
        assert f"Index Scan using {t}_open" in plans["stuck"], plans  # by lease, in order
        for plan in plans.values():
            assert "Seq Scan" not in plan, plans
    elif big.family == "mysql":

        def key(name: str) -> tuple[str, str]:
            row = _plan(big, getattr(q, name).text)[0]
            return str(row[5]), str(row[9])  # key, Extra

        assert key("open_counts")[0] == f"{t}_open"
        assert key("stuck")[0] == f"{t}_open"
        assert key("failed_counts") == (f"{t}_open", key("failed_counts")[1])
        assert "Using index" in key("failed_counts")[1]  # index-only: no row read
        assert key("failed_expired")[0] == f"{t}_expires"
        assert key("expired_records")[0] == f"{t}_expires"
        assert "Using index" in key("expired_records")[1]
        assert key("not_records")[0] == "PRIMARY"
    else:
        plan = " ".join(str(r[-1]) for r in _plan(big, q.open_counts.text))
        assert f"USING COVERING INDEX {t}_unresolved" in plan, plan
        plan = " ".join(str(r[-1]) for r in _plan(big, q.stuck.text))
        assert f"USING INDEX {t}_unresolved (status=? AND lease_until<?)" in plan, plan
        plan = " ".join(str(r[-1]) for r in _plan(big, q.not_records.text))
        assert "USING PRIMARY KEY" in plan, plan
        assert "SCAN" not in plan, plan
        plan = " ".join(str(r[-1]) for r in _plan(big, q.size.text))
        assert f"SCAN {t}_rows" in plan, plan  # the one row the triggers keep


def test_sqlites_row_count_follows_claims_completions_and_purges(tmp_path: Path) -> None:
    from mideng import Guard
    from mideng.schema.records import rows_table

    url, db_url = urls("sqlite", tmp_path, "followed")
    store = open_store(url)
    guard = Guard(store)

    @guard.idempotent("pay", key="{n}", ttl=0.001)
    def pay(n: int) -> int:
        return n

    engine = create_engine(db_url or "")

    def counted() -> tuple[int, int]:
        with engine.connect() as conn:
            kept = conn.execute(text(f"SELECT n FROM {rows_table('followed')}")).scalar_one()
            return int(kept), int(conn.execute(text("SELECT count(*) FROM followed")).scalar_one())

    try:
        for n in range(30):
            pay(n)
            pay(n)  # a duplicate writes no row
        kept, rows = counted()
        assert kept == rows == 30
        time.sleep(0.01)  # every record's retention (1 ms) ran out
        assert store.purge(100) == 30
        assert counted() == (0, 0)
    finally:
        store.close()
        engine.dispose()
