"""stats, scan, purge --older-than, inspect, unresolved and release, with --json parsed and
exit codes checked, on SQLite, PostgreSQL, MariaDB, Redis (standalone, behind a Sentinel) and
a 3-master Redis Cluster."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from mideng import Guard, open_store
from mideng.cli import main
from mideng.core.record import ClaimRequest
from tests.backends_redis import delete_prefix
from tests.redis_cluster import Server, cluster, need_binary
from tests.services import MYSQL_URL, POSTGRES_URL, REDIS_URL, need

KINDS = ["sqlite", "postgresql", "mysql", "redis", "redis-sentinel", "redis-cluster"]


@pytest.fixture(autouse=True)
def _logging_as_in_a_fresh_process() -> Iterator[None]:
    """The command as a shell runs it: no handler an earlier test left on the root logger
    (one writing to stdout would land in the --json output); pytest's capture stays."""
    root = logging.getLogger()
    left = [h for h in root.handlers if not type(h).__module__.startswith("_pytest")]
    for handler in left:
        root.removeHandler(handler)
    yield
    for handler in left:
        root.addHandler(handler)


@pytest.fixture(scope="module")
def sentinel() -> Iterator[tuple[Server, Server]]:
    """A master of the tests' own and a Sentinel watching it, on spare ports."""
    need_binary()
    master = Server().start()
    watcher = Server(
        f"sentinel monitor mideng-cli 127.0.0.1 {master.port} 1",
        "sentinel down-after-milliseconds mideng-cli 60000",
        sentinel=True,
    ).start()
    yield master, watcher
    watcher.cleanup()
    master.cleanup()


@pytest.fixture(params=KINDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    kind: str = request.param
    suffix = uuid.uuid4().hex[:10]
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'cli.db'}"
    elif kind in ("postgresql", "mysql"):
        need(kind)
        base = POSTGRES_URL if kind == "postgresql" else MYSQL_URL
        table = f"cli_survey_{suffix}"
        yield f"{base}?table={table}"
        import sqlalchemy

        engine = sqlalchemy.create_engine(base)
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text(f"DROP TABLE IF EXISTS {table}"))
        engine.dispose()
    elif kind == "redis":
        need("redis")
        prefix = f"mideng-cli-{suffix}"
        yield f"{REDIS_URL}?prefix={prefix}"
        import redis

        delete_prefix(redis.Redis.from_url(REDIS_URL), prefix)
    elif kind == "redis-sentinel":
        _, watcher = request.getfixturevalue("sentinel")
        yield f"redis+sentinel://127.0.0.1:{watcher.port}/mideng-cli/0?prefix=mideng-cli-{suffix}"
    else:
        prefix = f"mideng-cli-{suffix}"
        yield f"{cluster().url}?prefix={prefix}"
        delete_prefix(cluster().client(), prefix)


def populate(url: str) -> None:
    """4 finished orders (one big), a stock record that never expires, and a payment whose
    holder died: its lease ran out and nobody took it over."""
    store = open_store(url)
    guard = Guard(store)
    for n in range(3):
        guard.run("orders", f"o-{n}", lambda n=n: {"order": n})
    guard.run("orders", "o-big", lambda: {"lines": "x" * 5000})
    Guard(store, ttl=None).run("stock", "sku-1", lambda: {"reserved": 2})
    store.claim(ClaimRequest("payments", "p-1", uuid.uuid4().hex, 0.05, 3600.0, None))
    guard.close()
    time.sleep(0.15)


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def parsed(result: Result) -> Any:
    return json.loads(result.stdout)


def stuck_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    found = [
        r.getMessage()
        for r in caplog.records
        if r.levelname == "ERROR" and getattr(r, "mideng_outcome", None) == "stuck"
    ]
    caplog.clear()
    return found


def test_every_command_on_every_store(url: str, caplog: pytest.LogCaptureFixture) -> None:
    populate(url)
    nodes = 3 if url.startswith("redis+cluster") else 1

    stuck = cli("stats", "--store", url, "--json", "--grace", "0")
    assert stuck.exit_code == 1, stuck.output
    got = parsed(stuck)
    assert got["by_scope"] == {
        "orders": {"succeeded": 4},
        "payments": {"processing": 1},
        "stock": {"succeeded": 1},
    }
    assert (got["total"], got["unknown"], got["stuck"]) == (6, 0, 1)
    [record] = got["stuck_records"]
    assert (record["scope"], record["key"], record["fence"]) == ("payments", "p-1", 1)
    assert record["lease_lapsed_seconds"] >= 0.1
    assert got["oldest_processing_age_seconds"] >= 0.15
    [line] = stuck_lines(caplog)
    assert line.startswith("mideng stuck record scope=payments key=p-1 fence=1")

    calm = cli("stats", "--store", url, "--json", "--grace", "1h")
    assert calm.exit_code == 0, calm.output
    assert parsed(calm)["stuck"] == 0
    assert stuck_lines(caplog) == []
    orders = cli("stats", "--store", url, "--json", "--prefix", "ord")
    assert parsed(orders)["by_scope"] == {"orders": {"succeeded": 4}}
    assert orders.exit_code == 0
    table = cli("stats", "--store", url, "--grace", "0")
    assert table.exit_code == 1
    assert "orders" in table.stdout
    assert "stuck (lease ran out > 0 s ago): 1" in table.stdout
    assert len(stuck_lines(caplog)) == 1

    scanned = cli("scan", "--store", url, "--json", "--grace", "0", "--biggest", "2")
    assert scanned.exit_code == 1, scanned.output
    shape = parsed(scanned)
    assert shape["nodes"] == nodes
    assert shape["keys_by_scope"] == {"orders": 4, "payments": 1, "stock": 1}
    assert shape["without_ttl"] == 1
    assert shape["without_ttl_by_scope"] == {"stock": 1}
    histogram = shape["ttl_histogram"]
    assert list(histogram) == ["expired", "1m", "1h", "1d", "7d", "30d", "longer", "never"]
    # The payment expires lease + 3600 s after its claim (within the hour by now), the orders
    # a day after they finished, the stock never.
    assert histogram == {**dict.fromkeys(histogram, 0), "1h": 1, "1d": 4, "never": 1}
    assert [b["key"] for b in shape["biggest"]][:1] == ["o-big"]
    assert len(shape["biggest"]) == 2
    assert shape["biggest"][0]["bytes"] > 5000 > shape["biggest"][1]["bytes"]
    assert shape["stuck"] == 1
    assert len(stuck_lines(caplog)) == 1
    only_orders = cli("scan", "--store", url, "--json", "--prefix", "orders", "--grace", "0")
    assert only_orders.exit_code == 0
    assert parsed(only_orders)["keys_by_scope"] == {"orders": 4}
    assert cli("scan", "--store", url).exit_code == 0  # the table, nothing stuck past 60 s

    shown = cli("inspect", "--store", url, "--json", "orders", "o-1")
    assert shown.exit_code == 0
    assert parsed(shown)["result"] == {"order": 1}
    assert parsed(shown)["status"] == "succeeded"
    assert cli("inspect", "--store", url, "--json", "orders", "nope").exit_code == 1

    open_ = cli("unresolved", "--store", url, "--json")
    assert open_.exit_code == 1
    assert [r["key"] for r in parsed(open_)["records"]] == ["p-1"]

    kept = cli("purge", "--store", url, "--json", "--older-than", "1h")
    assert (kept.exit_code, parsed(kept)["purged"]) == (0, 0)
    purged = cli("purge", "--store", url, "--json", "--older-than", "0s", "--limit", "3")
    assert parsed(purged) == {
        "purged": 3,
        "older_than_seconds": 0.0,
        "self_expiring": url.startswith("redis"),
    }
    rest = cli("purge", "--store", url, "--json", "--older-than", "0s")
    assert parsed(rest)["purged"] == 2
    after = parsed(cli("stats", "--store", url, "--json"))
    assert after["by_scope"] == {"payments": {"processing": 1}}  # never a processing record

    evicted = cli("release", "--store", url, "--json", "--yes", "payments", "p-1")
    assert parsed(evicted) == {"scope": "payments", "key": "p-1", "evicted": True}
    again = cli("release", "--store", url, "--json", "--yes", "payments", "p-1")
    assert (again.exit_code, parsed(again)["evicted"]) == (0, False)
    empty = cli("unresolved", "--store", url, "--json")
    assert (empty.exit_code, parsed(empty)) == (0, {"count": 0, "records": []})
    assert parsed(cli("stats", "--store", url, "--json"))["total"] == 0


def test_the_async_survey_counts_the_same(url: str) -> None:
    populate(url)
    store = open_store(url)

    async def both() -> tuple[Any, Any]:
        found = await store.asurvey(grace=0, biggest=1)  # type: ignore[attr-defined]
        gone = await store.apurge_older(3600)  # type: ignore[attr-defined]
        await store.aclose()
        return found, gone

    found, gone = asyncio.run(both())
    sync = store.survey(grace=0, biggest=1)  # type: ignore[attr-defined]
    assert found.by_scope == sync.by_scope
    assert found.expiry == sync.expiry
    assert (found.stuck_count, found.nodes) == (1, sync.nodes)
    assert [b.key for b in found.biggest] == ["o-big"]
    assert gone == 0
    store.close()


def test_usage_errors_exit_2_and_a_dead_store_exits_1(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'u.db'}"
    assert cli("stats", "--store", db, "--grace", "soon").exit_code == 2
    assert cli("scan", "--store", db, "--biggest", "-1").exit_code == 2
    assert cli("purge", "--store", db, "--older-than", "7 parsecs").exit_code == 2
    assert cli("stats", "--store", "nosuch://x").exit_code == 2
    assert cli("stats", "--frobnicate").exit_code == 2
    down = cli("stats", "--store", "redis://127.0.0.1:1/0")
    assert down.exit_code == 1
    assert "failed" in down.output


def test_python_dash_m_is_the_mideng_command(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'm.db'}"
    populate(db)
    env_run = subprocess.run(
        [sys.executable, "-m", "mideng", "stats", "--json", "--grace", "0"],
        capture_output=True,
        text=True,
        env={"MIDENG_STORE": db, "PATH": ""},
        check=False,
        timeout=60,
    )
    assert env_run.returncode == 1, env_run.stderr
    moving = (  # the clock's fields
        "now",
        "oldest_processing_age_seconds",
        "oldest_unknown_age_seconds",
        "stuck_records",
    )
    by_module = json.loads(env_run.stdout)
    by_command = parsed(cli("stats", "--store", db, "--json", "--grace", "0"))
    assert list(by_module) == list(by_command)
    assert {k: v for k, v in by_module.items() if k not in moving} == {
        k: v for k, v in by_command.items() if k not in moving
    }
    assert by_module["stuck_records"][0]["key"] == "p-1"
    helped = subprocess.run(
        [sys.executable, "-m", "mideng", "--help"], capture_output=True, text=True, check=False
    )
    assert helped.returncode == 0
    assert "Usage: mideng" in helped.stdout
    assert "scan" in helped.stdout


def test_a_hybrid_store_is_surveyed_through_its_durable_store(tmp_path: Path) -> None:
    need("redis")
    import redis

    from mideng.stores.hybrid import HybridStore
    from mideng.stores.redis import RedisStore
    from mideng.stores.sqlite import SQLiteStore

    prefix = f"mideng-cli-{uuid.uuid4().hex[:10]}"
    durable = f"sqlite:///{tmp_path / 'durable.db'}"
    fast = RedisStore.from_url(REDIS_URL, prefix=prefix)
    store = HybridStore(fast=fast, durable=SQLiteStore.from_url(durable))
    try:
        guard = Guard(store)
        for n in range(3):
            guard.run("orders", f"o-{n}", lambda n=n: {"order": n})
            guard.run("orders", f"o-{n}", lambda n=n: {"order": n})  # answered from Redis
        found = store.survey(grace=0)
        assert found.by_scope == {"orders": {"succeeded": 3}}
        assert asyncio.run(store.asurvey()).by_scope == found.by_scope
        assert fast.survey().by_scope == found.by_scope  # the copies, for comparison
        assert store.purge_older(0) == 3
        assert store.survey().by_scope == {}
        assert fast.survey().by_scope == {}  # the Redis copies of the purged records went too
    finally:
        store.close()
        delete_prefix(redis.Redis.from_url(REDIS_URL), prefix)
