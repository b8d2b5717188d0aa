"""Upgrading from the tables mideng 0.1.0 made, holding the rows its API wrote (``data/``), on
SQLite, PostgreSQL and MariaDB: refused until migrated where upgrades are not automatic, then
``mideng migrate`` takes them to this version, and afterwards a finished call replays, the
operation that died in its second step resumes there, and the messages never relayed go out."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from click.testing import CliRunner

from mideng import Guard, open_store
from mideng.cli import main
from mideng.errors import SchemaVersionError
from mideng.outbox import Relay
from mideng.schema import CURRENT
from tests.outbox.recording import Recording
from tests.schema.conftest import DATA, Db

# What the captured rows are (data/capture.py).
PAID = {"order": "o-1", "paid": 100}


def _migrate(db: Db, *args: str) -> Any:
    argv = ["migrate", "--db", db.url, "--table", db.records, "--outbox", db.outbox, *args]
    return CliRunner().invoke(main, argv)


def _guard(db: Db) -> Guard:
    return Guard(open_store(db.url, table=db.records), lease=1.0, ttl=None)


def _relay_once(db: Db) -> list[Any]:
    publisher = Recording()

    async def main() -> None:
        relay = Relay(db.url, publisher, table=db.outbox, listen=False)
        try:  # not ``async with``: a refused start is to be closed too
            await relay.run_once()
        finally:
            await relay.close()

    asyncio.run(main())
    return publisher.sent


def test_the_old_tables_are_refused_until_migrated(server: Db) -> None:
    """On a server the store and the relay refuse tables of an older version, naming the
    command that upgrades them; nothing of theirs changed meanwhile."""
    server.load_0_1_0()
    with pytest.raises(SchemaVersionError) as refused:
        open_store(server.url, table=server.records)
    message = str(refused.value)
    assert f"record table {server.records} was made before schema versions" in message
    assert re.search(rf"`mideng migrate --db \S+ --table {server.records}`", message)
    with pytest.raises(SchemaVersionError, match=f"--outbox {server.outbox}"):
        _relay_once(server)
    assert server.versions() == []  # refused, not half upgraded
    assert server.run(f"SELECT count(*) FROM {server.records}")[0][0] == 2


def test_migrate_takes_the_old_tables_to_this_version_and_loses_nothing(db: Db) -> None:
    db.load_0_1_0()
    planned = _migrate(db, "--plan")
    assert planned.exit_code == 0, planned.output
    assert db.versions() == []  # a plan changes nothing
    done = _migrate(db)
    assert done.exit_code == 0, done.output
    assert f"record table {db.records}: made before schema versions" in done.output
    assert f"applied {CURRENT}:" in done.output
    assert db.versions("records") == list(range(1, CURRENT + 1))
    assert db.versions("outbox") == list(range(1, CURRENT + 1))
    again = _migrate(db)
    assert again.exit_code == 0, again.output
    assert f"record table {db.records}: at version {CURRENT}, nothing to do" in again.output
    assert "applied" not in again.output

    guard = _guard(db)
    runs: list[str] = []
    try:

        @guard.idempotent("pay", key="{order}")
        def pay(order: str) -> dict[str, Any]:
            runs.append(order)
            return {"order": order, "paid": 0}

        @guard.step("pack")
        def pack(order: str) -> str:
            runs.append(f"pack {order}")
            return f"packed again {order}"

        @guard.step("send")
        def send(order: str) -> str:
            runs.append(f"send {order}")
            return f"sent {order}"

        @guard.operation("ship", key="{order}", steps=("pack", "send"))
        def ship(order: str) -> str:
            return f"{pack(order)}, {send(order)}"

        assert pay("o-1") == PAID  # the stored result, the body not run
        # The holder died in "send"; its lease is long gone: a retry takes the operation
        # over, gets "pack"'s recorded result back and runs only "send".
        assert ship("o-2") == "packed o-2, sent o-2"
        assert runs == ["send o-2"]
    finally:
        guard.close()

    # Both messages 0.1.0 wrote and never relayed go out, under the ids they were given.
    sent = _relay_once(db)
    captured = json.loads((DATA / f"v0.1.0-{db.family}.json").read_text())["outbox"]
    assert sorted(m.message_id for m in sent) == sorted(row["id"] for row in captured)
    assert {m.destination: json.loads(m.body) for m in sent} == {
        "orders": {"order": "o-3"},
        "audit": {"what": "unkeyed"},
    }
