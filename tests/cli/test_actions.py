"""``resolve`` / ``release`` with ``--if-fence``, and ``mideng outbox dead`` / ``requeue``:
done while the record or row is as seen; ``changed meanwhile: ...`` and exit 1 when not."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from click.testing import CliRunner

from mideng import Guard, open_store
from mideng.cli import main
from mideng.core.record import ClaimRequest, ExpiryPolicy, Status
from mideng.outbox import Backoff, Relay
from tests.cli.stores import url
from tests.outbox.conftest import Db, db, fill
from tests.outbox.recording import Recording

__all__ = ["db", "url"]  # the fixtures


def _claim(guard: Guard, key: str, lease: float, expiry: ExpiryPolicy) -> None:
    guard.store.claim(ClaimRequest("charge", key, uuid.uuid4().hex, lease, 60, None, expiry))


def test_resolve_if_fence(url: str) -> None:
    guard = Guard(open_store(url))
    guard.configure_scope("charge", on_expiry="unknown")
    _claim(guard, "c1", 0.1, ExpiryPolicy.UNKNOWN)
    time.sleep(0.25)
    _claim(guard, "c1", 0.1, ExpiryPolicy.UNKNOWN)  # turns it UNKNOWN, fence 1
    cli = CliRunner()
    base = ["resolve", "--store", url, "charge", "c1", "--result", '{"charged": true}']
    stale = cli.invoke(main, [*base, "--if-fence", "2"])
    assert stale.exit_code == 1
    assert "changed meanwhile: charge:c1 is unknown, fence 1" in stale.output
    assert len(stale.output.strip().splitlines()) == 1
    wrong_status = cli.invoke(main, [*base, "--if-fence", "1", "--if-status", "processing"])
    assert wrong_status.exit_code == 1
    done = cli.invoke(main, [*base, "--if-fence", "1"])
    assert done.exit_code == 0, done.output
    assert "charge:c1 is now succeeded" in done.output
    again = cli.invoke(main, [*base, "--if-fence", "1"])
    assert again.exit_code == 1
    assert "is succeeded, fence 1" in again.output
    bad = cli.invoke(main, [*base, "--if-fence", "-1"])
    assert bad.exit_code == 2


def test_release_if_fence(url: str) -> None:
    guard = Guard(open_store(url))
    _claim(guard, "r1", 0.1, ExpiryPolicy.TAKE_OVER)
    time.sleep(0.25)
    cli = CliRunner()
    base = ["release", "--store", url, "--yes", "--json", "charge", "r1"]
    base += ["--if-status", "processing"]
    _claim(guard, "r1", 30, ExpiryPolicy.TAKE_OVER)  # a take-over between seeing and acting
    moved = cli.invoke(main, [*base, "--if-fence", "1"])
    assert moved.exit_code == 1
    answer = json.loads(moved.output)
    assert answer["changed"] is True
    assert (answer["now"]["status"], answer["now"]["fence"]) == ("processing", 2)
    live = cli.invoke(main, [*base, "--if-fence", "2"])  # as seen, but its lease is live
    assert live.exit_code == 1
    assert guard.get("charge", "r1") is not None
    text = cli.invoke(
        main, ["release", "--store", url, "--yes", "charge", "gone", "--if-fence", "1"]
    )
    assert text.exit_code == 1
    assert "changed meanwhile: charge:gone is gone" in text.output
    record = guard.get("charge", "r1")
    assert record is not None
    assert record.status is Status.PROCESSING


def _dead(db: Db, ids: set[str]) -> None:
    async def main() -> None:
        publisher = Recording(fail=lambda message: message.message_id in ids)
        async with Relay(
            db.engine, publisher, table=db.table, listen=False, max_attempts=1, backoff=Backoff(0)
        ) as relay:
            await relay.batch()

    asyncio.run(main())


def test_outbox_dead_and_requeue(db: Db) -> None:
    ids = fill(db, keys=2, per_key=1, unkeyed=1)
    cli = CliRunner()
    where = ["--db", db.url, "--table", db.table]
    none = cli.invoke(main, ["outbox", "dead", *where])
    assert none.exit_code == 0, none.output
    assert "0 dead row(s)" in none.output
    _dead(db, {ids[0], ids[2]})
    listed = cli.invoke(main, ["outbox", "dead", *where, "--json"])
    assert listed.exit_code == 1  # found some
    shown = json.loads(listed.output)
    assert shown["count"] == 2
    assert {row["id"] for row in shown["rows"]} == {ids[0], ids[2]}
    row = next(row for row in shown["rows"] if row["id"] == ids[0])
    assert set(row) == {
        "id", "destination", "key", "seq", "state", "attempts", "error", "created_at",
        "age_seconds",
    }  # fmt: skip
    assert (row["destination"], row["key"], row["state"], row["attempts"]) == (
        "orders",
        "order:0",
        "dead",
        1,
    )
    assert "broker refused" in row["error"]

    dry = cli.invoke(main, ["outbox", "requeue", *where, "--destination", "orders", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert f"would requeue {ids[0]}" in dry.output
    assert "would requeue 2 row(s)" in dry.output
    assert cli.invoke(main, ["outbox", "dead", *where]).exit_code == 1  # nothing changed

    one = cli.invoke(main, ["outbox", "requeue", *where, ids[0], "--json"])
    assert one.exit_code == 0, one.output
    assert json.loads(one.output) == {
        "dry_run": False,
        "requeued": 1,
        "rows": [{"id": ids[0], "outcome": "requeued", "state": "pending", "attempts": 0}],
    }
    mixed = cli.invoke(main, ["outbox", "requeue", *where, ids[0], ids[2], "no-such-id"])
    assert mixed.exit_code == 1
    assert f"changed meanwhile: {ids[0]} is pending, attempts 0" in mixed.output
    assert f"requeued {ids[2]}" in mixed.output
    assert "changed meanwhile: no-such-id is gone" in mixed.output


def test_outbox_requeue_usage_errors(db: Db) -> None:
    cli = CliRunner()
    where = ["--db", db.url, "--table", db.table]
    neither = cli.invoke(main, ["outbox", "requeue", *where])
    assert neither.exit_code == 2
    both = cli.invoke(main, ["outbox", "requeue", *where, "x", "--destination", "d"])
    assert both.exit_code == 2
    bad_url = cli.invoke(main, ["outbox", "dead", "--db", "nosuch://x"])
    assert bad_url.exit_code == 2
    assert len(bad_url.output.strip().splitlines()) <= 3
    no_table = cli.invoke(main, ["outbox", "dead", "--db", db.url, "--table", "no_such_table"])
    assert no_table.exit_code == 1
    assert "Traceback" not in no_table.output
