"""The app's management commands, each run as ``manage.py <command>`` in a child process
against a real database (SQLite; PostgreSQL for stats), the relay against Redis Streams with
real published messages. Their store, database, tables and broker come from MIDENG."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from mideng import Guard, open_store
from mideng.core.record import ClaimRequest
from mideng.outbox import Outbox
from tests.contrib.django.project import Project, django_database, fresh_database
from tests.services import REDIS_URL, need

SHOP = """
import os
from mideng.contrib.django import guard

charged = []

@guard().step("charge")
def charge(order: str) -> str:
    charged.append(order)
    return "charged"

@guard().operation("dj_pay", key="{order}", steps=("charge", "notify"))
def pay(order: str) -> str:
    charge(order)
    if os.environ.get("SHOP_DOWN"):
        raise RuntimeError("the notifier is down")
    return "paid"
"""


class Shop:
    """A migrated project on one database, with its record table's URL for a store."""

    def __init__(self, folder: Path, url: str, **mideng: Any) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.records, self.outbox, self.url = f"rec_{suffix}", f"box_{suffix}", url
        names = {"records": self.records, "outbox": self.outbox, **mideng}
        self.project = Project(folder, django_database(url), names)
        (folder / "shop_ops.py").write_text(SHOP)
        done = self.project.manage("migrate", "mideng")
        assert done.returncode == 0, done.stderr

    def manage(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.project.manage(*args, **env)

    def guard(self) -> Guard:
        return Guard(open_store(self.url, table=self.records, auto_upgrade=False))


@pytest.fixture
def shop(tmp_path: Path) -> Shop:
    return Shop(tmp_path, f"sqlite:///{tmp_path / 'shop.db'}")


@pytest.fixture(scope="module")
def untouched(tmp_path_factory: pytest.TempPathFactory) -> Shop:
    """A project the tests that change nothing share."""
    folder = tmp_path_factory.mktemp("untouched")
    return Shop(folder, f"sqlite:///{folder / 'shop.db'}")


def _some_records(shop: Shop) -> None:
    """Two succeeded, one stuck (its holder gone), one expired."""
    guard = shop.guard()
    try:
        guard.run("dj_orders", "o1", lambda: 1)
        guard.run("dj_orders", "o2", lambda: 2)
        guard.store.claim(ClaimRequest("dj_export", "e1", "gone", 0.05, 60))
        guard.run("dj_old", "x1", lambda: 3, policy={"ttl": 0.05})
    finally:
        guard.close()
    time.sleep(0.1)  # the lease and the retention run out: store time moves on


def _without_clock(report: dict[str, Any]) -> dict[str, Any]:
    """A stats report without what moves with the clock."""
    moving = ("now", "oldest_processing_age_seconds", "oldest_unknown_age_seconds")
    kept = {k: v for k, v in report.items() if k not in moving}
    kept["stuck_records"] = [
        {k: v for k, v in r.items() if k != "lease_lapsed_seconds"} for r in kept["stuck_records"]
    ]
    return kept


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mideng", *args], capture_output=True, text=True, check=False
    )


def test_stats_json_is_mideng_stats_json_and_exits_1_on_a_stuck_record(tmp_path: Path) -> None:
    # PostgreSQL: the store URL the app builds from DATABASES' entry, credentials and all.
    with fresh_database("postgresql", tmp_path) as url:
        shop = Shop(tmp_path, url)
        _some_records(shop)
        done = shop.manage("mideng_stats", "--json", "--grace", "0")
        assert done.returncode == 1, done.stderr
        assert done.stderr.strip().splitlines()[-1] == (
            "CommandError: 1 stuck and 0 UNKNOWN record(s)"
        )
        found = json.loads(done.stdout)
        store_url = django_store_url(shop)
        cli = _cli("stats", "--json", "--grace", "0", "--store", store_url)
        assert cli.returncode == 1
        assert _without_clock(found) == _without_clock(json.loads(cli.stdout))
        assert found["by_scope"]["dj_orders"] == {"succeeded": 2}
        assert [r["key"] for r in found["stuck_records"]] == ["e1"]
        assert found["store"] == "postgresql"
        assert found["estimated"] is False  # a small table: every row counted
        exact = shop.manage("mideng_stats", "--json", "--grace", "0", "--exact")
        assert exact.returncode == 1, exact.stderr
        assert _without_clock(json.loads(exact.stdout)) == _without_clock(found)


def django_store_url(shop: Shop) -> str:
    """The store URL the app builds from DATABASES, with its record table."""
    found = shop.manage(
        "shell",
        "-c",
        "from mideng.contrib.django.settings import config\nprint(config().store_url())",
    )
    assert found.returncode == 0, found.stderr
    return found.stdout.strip().splitlines()[-1] + f"?table={shop.records}"


def test_purge_deletes_expired_records(shop: Shop) -> None:
    _some_records(shop)
    done = shop.manage("mideng_purge", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "purged": 1,
        "older_than_seconds": None,
        "self_expiring": False,
    }
    older = shop.manage("mideng_purge", "--older-than", "0")
    assert older.stdout.strip() == "purged 2 finished, older than 0 s, record(s)"


def _rows(output: str) -> list[tuple[str, str, str]]:
    document = json.loads(output)
    return [(r["key"], r["outcome"], r["detail"]) for r in document["operations"]]


#: Reconcile takes operations begun just now too (by default they are their callers' to retry).
NOW = ("--min-age", "0")


def test_reconcile_plans_then_applies(shop: Shop) -> None:
    failed = shop.manage(
        "shell",
        "-c",
        "import shop_ops\ntry: shop_ops.pay('o1')\nexcept RuntimeError: pass",
        SHOP_DOWN="1",
    )
    assert failed.returncode == 0, failed.stderr
    young = shop.manage("mideng_reconcile", "--plan", "--import", "shop_ops", "--json")
    (left,) = _rows(young.stdout)
    assert left[:2] == ("o1", "left_to_caller")
    assert left[2].startswith("released, begun ")
    plan = shop.manage("mideng_reconcile", "--plan", "--import", "shop_ops", "--json", *NOW)
    assert plan.returncode == 0, plan.stderr
    assert _rows(plan.stdout) == [("o1", "would_run", "released")]
    blind = shop.manage("mideng_reconcile", "--apply", "--json", *NOW)  # nothing registers dj_pay
    assert blind.returncode == 1
    assert _rows(blind.stdout)[0][1] == "unregistered"
    applied = shop.manage("mideng_reconcile", "--apply", "--import", "shop_ops", "--json", *NOW)
    assert applied.returncode == 0, applied.stderr
    assert _rows(applied.stdout) == [("o1", "finished", "paid")]
    done = shop.manage("mideng_reconcile", "--apply", "--import", "shop_ops", "--json")
    assert done.returncode == 0
    assert json.loads(done.stdout) == {
        "count": 0,
        "plan": False,
        "needs_attention": False,
        "operations": [],
    }


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("mideng_reconcile",), "one of the arguments --plan --apply is required"),
        (("mideng_reconcile", "--plan", "--import", "no_such_shop"), "can't import no_such_shop"),
        (("mideng_stats", "--store", "mongo://db/x"), "no store for scheme 'mongo'"),
        (("mideng_stats", "--grace", "-1"), "invalid positive value"),
        (("mideng_relay", "--once"), "no broker: set MIDENG['broker'] or pass --broker"),
        (("mideng_relay", "--once", "--broker", "mqtt://x"), "mqtt"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    untouched: Shop, args: tuple[str, ...], said: str
) -> None:
    done = untouched.manage(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr
    assert "Traceback" not in done.stderr


def test_a_store_that_fails_is_one_line_and_exit_1(untouched: Shop) -> None:
    down = "postgresql://nobody@127.0.0.1:1/none"
    done = untouched.manage("mideng_stats", "--store", down)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def _add(shop: Shop, stream: str, keys: list[str]) -> list[str]:
    """Rows committed into the project's outbox, through its database: their ids."""
    engine = sa.create_engine(shop.url)
    try:
        outbox = Outbox(engine, table=shop.outbox)
        with engine.begin() as conn:
            return [outbox.add(conn, stream, {"order": key}, key=key) for key in keys]
    finally:
        engine.dispose()


def _count(shop: Shop, query: str) -> int:
    engine = sa.create_engine(shop.url)
    try:
        with engine.connect() as conn:
            return int(conn.exec_driver_sql(query).scalar_one())
    finally:
        engine.dispose()


def _sent(shop: Shop) -> int:
    return _count(shop, f"SELECT COUNT(*) FROM {shop.outbox} WHERE state = 1")


def test_relay_publishes_to_redis_streams_once_and_until_sigterm(tmp_path: Path) -> None:
    need("redis")
    stream = f"djapp_{uuid.uuid4().hex[:8]}"
    shop = Shop(tmp_path, f"sqlite:///{tmp_path / 'shop.db'}", broker=REDIS_URL)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        first = _add(shop, stream, ["order:1", "order:2"])
        once = shop.manage("mideng_relay", "--once", "-v", "2")
        assert once.returncode == 0, once.stderr
        assert "published 2, failed 0, dead 0" in once.stdout
        # Django's verbosity 2 is mideng relay's -v: a DEBUG line per batch.
        assert "DEBUG outbox relay batch: 2 rows claimed, 2 published, 0 failed" in once.stderr
        published: Any = client.xrange(stream)
        assert len(published) == 2
        assert all(
            any(v.decode(errors="replace") in first for v in fields.values())
            for _, fields in published
        )

        # SIGTERM while it works through 200 keys a batch each: the batches in flight are
        # published and written back, nothing is left claimed, nothing published unmarked.
        _add(shop, stream, [f"order:{n}" for n in range(3, 203)])
        running = shop.project.start("mideng_relay", "--batch", "1", "--poll", "0.1")
        try:
            deadline = time.monotonic() + 20
            while _sent(shop) < 3 and time.monotonic() < deadline:
                time.sleep(0.02)  # waiting for the relay's first batches, not ordering a race
            running.send_signal(signal.SIGTERM)
            _, err = running.communicate(timeout=20)
        finally:
            if running.poll() is None:
                running.kill()
        assert running.returncode == 0, err
        claimed = f"SELECT COUNT(*) FROM {shop.outbox}_keys WHERE claimed_by IS NOT NULL"
        assert _count(shop, claimed) == 0
        assert client.xlen(stream) == _sent(shop) >= 3
        rest = shop.manage("mideng_relay", "--once")
        assert rest.returncode == 0, rest.stderr
        assert (client.xlen(stream), _sent(shop)) == (202, 202)
    finally:
        client.delete(stream)
        client.close()
