"""What a store, an outbox and the relay do with the tables they find when they start: a fresh
database just works, a current one is used, a newer one is refused naming the release to
install, an older one is upgraded only where automatic upgrade is on (by default the embedded
SQLite store) and otherwise refused naming the command; all once per store, never per call."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from click.testing import CliRunner

from mideng import Guard, open_store
from mideng.cli import main
from mideng.errors import SchemaVersionError
from mideng.outbox import Outbox, Relay
from mideng.schema import CURRENT
from mideng.stores.sql import SQLStore
from mideng.stores.sqlite import SQLiteStore
from tests.outbox.recording import Recording
from tests.schema.conftest import Db

EVERY = list(range(1, CURRENT + 1))


def _migrate(db: Db, *args: str) -> Any:
    argv = ["migrate", "--db", db.url, "--table", db.records, "--outbox", db.outbox, *args]
    return CliRunner().invoke(main, argv)


def _claim_once(store: Any, key: str = "k") -> Any:
    guard = Guard(store)
    return guard.run("pay", key, lambda: {"paid": key})


def _newer(db: Db) -> None:
    """A later mideng has migrated the tables one version past this one."""
    for component, name in (("records", db.records), ("outbox", db.outbox)):
        db.run(
            "INSERT INTO mideng_schema (component, name, version, title, mideng, applied_at) "
            "VALUES (:c, :n, :v, 'later', '9.9.0', 0)",
            {"c": component, "n": name, "v": CURRENT + 1},
        )


def _relay_start(db: Db) -> None:
    async def main() -> None:
        relay = Relay(db.url, Recording(), table=db.outbox, listen=False)
        try:
            await relay.start()
        finally:
            await relay.close()

    asyncio.run(main())


def _outbox(db: Db, **options: Any) -> Outbox:
    return Outbox(db.engine, table=db.outbox, **options)


def test_a_fresh_database_gets_the_tables_at_this_version(db: Db) -> None:
    store = open_store(db.url, table=db.records)
    try:
        assert _claim_once(store) == {"paid": "k"}
    finally:
        store.close()
    _outbox(db).create_schema()
    assert db.versions("records") == EVERY
    assert db.versions("outbox") == EVERY
    _relay_start(db)  # the relay creates nothing, and finds what it needs


def test_a_newer_schema_is_refused_naming_the_release_to_install(db: Db) -> None:
    store = open_store(db.url, table=db.records)
    store.close()
    _outbox(db).create_schema()
    _newer(db)
    install = re.escape("install mideng 9.9.0 or later")
    with pytest.raises(SchemaVersionError, match=install):
        open_store(db.url, table=db.records)
    with pytest.raises(SchemaVersionError, match=install):
        _outbox(db).create_schema()
    with pytest.raises(SchemaVersionError, match=install):
        _relay_start(db)
    done = _migrate(db)
    assert done.exit_code == 1, done.output
    assert "install mideng 9.9.0 or later" in done.output
    assert "Traceback" not in done.output
    assert db.versions() == [*EVERY, CURRENT + 1]  # nothing touched


def test_an_older_schema_is_upgraded_only_when_allowed(server: Db) -> None:
    assert _migrate(server, "--to", "1").exit_code == 0
    with pytest.raises(SchemaVersionError) as refused:
        open_store(server.url, table=server.records)
    message = str(refused.value)
    assert "is at schema version 1 and this mideng" in message
    assert re.search(rf"`mideng migrate --db \S+ --table {server.records}` first", message)
    assert ":@" not in message.split("--db", 1)[1]  # a password is never printed
    with pytest.raises(SchemaVersionError, match=f"--outbox {server.outbox}"):
        _outbox(server).create_schema()
    assert server.versions() == [1]

    store = open_store(f"{server.url}?auto_upgrade=true", table=server.records)
    try:
        assert _claim_once(store) == {"paid": "k"}
    finally:
        store.close()
    _outbox(server, auto_upgrade=True).create_schema()
    assert server.versions("records") == EVERY
    assert server.versions("outbox") == EVERY


def test_the_embedded_store_upgrades_itself_unless_told_not_to(db: Db) -> None:
    if db.family != "sqlite":
        pytest.skip("the SQLite store's default")
    assert _migrate(db, "--to", "1").exit_code == 0
    path = db.url.removeprefix("sqlite:///")
    with pytest.raises(SchemaVersionError, match="mideng migrate --db sqlite:///"):
        SQLiteStore(path, table=db.records, auto_upgrade=False)
    store = SQLiteStore(path, table=db.records)
    try:
        assert _claim_once(store) == {"paid": "k"}
    finally:
        store.close()
    assert db.versions() == EVERY
    _outbox(db).create_schema()  # the outbox on SQLite too
    assert db.versions("outbox") == EVERY


def test_the_version_is_read_once_per_store_not_per_call(db: Db) -> None:
    """A store reads the version when it first touches its tables; a later change of it is
    seen by the next store, never by the calls of one already running."""
    running = open_store(db.url, table=db.records)
    try:
        assert _claim_once(running, "before") == {"paid": "before"}
        _newer(db)
        assert _claim_once(running, "after") == {"paid": "after"}
        with pytest.raises(SchemaVersionError):
            open_store(db.url, table=db.records)
    finally:
        running.close()


def test_a_store_that_creates_nothing_checks_at_its_first_operation(server: Db) -> None:
    store = SQLStore.from_url(server.url, table=server.records, create_schema=False)
    try:
        with pytest.raises(SchemaVersionError, match=f"{server.records} does not exist"):
            _claim_once(store)

        async def body() -> str:
            return "async"

        async def aclaim() -> Any:
            return await Guard(store).arun("pay", "a", body)

        with pytest.raises(SchemaVersionError, match="does not exist"):
            asyncio.run(aclaim())
        assert _migrate(server).exit_code == 0
        # Refused, the check was not passed: the next operation makes it again.
        assert _claim_once(store) == {"paid": "k"}
        assert asyncio.run(aclaim()) == "async"
        assert server.run(f"SELECT count(*) FROM {server.records}")[0][0] == 2
    finally:
        store.close()


def test_the_async_start_up_rule_is_the_same(server: Db) -> None:
    assert _migrate(server, "--to", "1").exit_code == 0
    store = SQLStore.from_url(server.url, table=server.records, create_schema=False)
    try:
        with pytest.raises(SchemaVersionError, match="is at schema version 1"):
            asyncio.run(store.acreate_schema())
        store.auto_upgrade = True
        asyncio.run(store.acreate_schema())
    finally:
        store.close()
    assert server.versions() == EVERY


def test_tables_dropped_by_hand_are_made_again(db: Db) -> None:
    store = open_store(db.url, table=db.records)
    store.close()
    with db.engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {db.records}_steps")
        conn.exec_driver_sql(f"DROP TABLE {db.records}")
    assert db.versions() == EVERY  # the rows outlive the tables
    store = open_store(db.url, table=db.records)
    try:
        assert _claim_once(store) == {"paid": "k"}
    finally:
        store.close()
    assert db.versions() == EVERY


def test_stores_opening_one_fresh_database_at_once_make_it_once(db: Db) -> None:
    """Eight stores opening at once, each on its own connections: one creates the tables under
    the lock, the others wait for it and find them there."""
    from concurrent.futures import ThreadPoolExecutor

    def open_and_claim(n: int) -> Any:
        store = open_store(db.url, table=db.records)
        try:
            return _claim_once(store, f"k{n}")
        finally:
            store.close()

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(open_and_claim, range(8)))
    assert answers == [{"paid": f"k{n}"} for n in range(8)]
    assert db.versions() == EVERY
