"""MySQL/MariaDB: what the relay changes, it reaches by primary key, so it asks for no other lock.

On a table as small as a few dozen key rows InnoDB runs ``UPDATE … WHERE aggregateid IN (…)``
as a scan of the whole table, and a scan asks for the lock of every row it passes. A writer
holding one key row and waiting for another that a write-back holds then stood in a cycle with
it: an ``UPDATE`` (READ COMMITTED) queues for the writer's row only while it reads the row's
last committed version and moves on, but a deadlock search that runs meanwhile (any other
transaction starting to wait) finds the cycle, and InnoDB rolls back the lighter of the two,
often the writer. A ``DELETE`` does not move on: it waits for the writer's row, a deadlock as
soon as the writer asks for a row the ``DELETE`` holds. (MariaDB's ``SKIP LOCKED`` queues for
a held row for an instant too; there the relay locks key rows with ``NOWAIT`` by key, and
those reads' plans are checked here as well.)
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from mideng.db.caller_connection import Site
from mideng.db.statements import Sql
from mideng.outbox import Relay
from mideng.outbox.ops import settle_keys
from mideng.outbox.statements import Queries
from tests.outbox.conftest import Db, drop, open_db
from tests.outbox.recording import Recording
from tests.outbox.test_lock_order import _add


@pytest.fixture
def mysql_db(tmp_path: Path) -> Iterator[Db]:
    db = open_db("mysql", tmp_path)
    yield db
    drop(db)


def _plan(connection: Any, sql: Sql, params: dict[str, Any]) -> tuple[str, str]:
    """How InnoDB reaches the rows of the table a statement changes (the first the plan
    names; a sub-select follows): the index, and the access type."""
    row = next(iter(connection.execute(text(f"EXPLAIN {sql.text}"), params).mappings()))
    return str(row["key"]), str(row["type"])


def test_every_change_the_relay_makes_reaches_its_rows_by_primary_key(mysql_db: Db) -> None:
    """25 keys of two rows each (the size of the two-relay storm), and each statement that
    changes or locks rows named by a list, naming 20 of them, or by one key or id, with
    MariaDB's NOWAIT reads and with SKIP LOCKED: InnoDB reads them by primary key (a lookup
    per row), never by a scan passing the other rows."""
    db = mysql_db
    with db.engine.begin() as connection:
        for _ in range(2):
            for k in range(25):
                _add(db, connection, f"order:{k}")
    q = Queries("mariadb", db.table, nowait=True)
    skip = Queries("mysql", db.table)
    keys = [f"order:{k}" for k in range(20)]
    fixed = {"token": "t", "until": 1.0, "now": 1.0, "retry_at": 1.0, "attempts": 1}
    with db.engine.connect() as connection:
        ids = [row[0] for row in connection.execute(text(f"SELECT id FROM {db.table} LIMIT 20"))]
        plans = {}
        lists = ("claim_keys", "claim_rows", "sent", "lock_keys", "lock_due", "lock_idle")
        for name in (*lists, "advance", "release"):
            names = ids if name in ("claim_rows", "sent") else keys
            binds = {f"i{n}": value for n, value in enumerate(names)}
            plans[name] = _plan(connection, q.in_list(name, len(names)), {**fixed, **binds})
        binds = {f"i{n}": value for n, value in enumerate(keys)}
        plans["lock_keys, SKIP LOCKED"] = _plan(
            connection, skip.in_list("lock_keys", len(keys)), {**fixed, **binds}
        )
        one = {**fixed, "key": "order:3", "id": ids[0], "error": "", "state": 0}
        for name, sql in (
            ("purge_key", q.purge_key),
            ("back_off", q.back_off),
            ("failed", q.failed),
        ):
            plans[name] = _plan(connection, sql, one)
    # A lookup per key: "const", "eq_ref", or a "range" of single keys; "index" or "ALL" is
    # a scan of the whole table, primary key or not.
    lookups = ("const", "eq_ref", "range")
    scans = {
        name: plan for name, plan in plans.items() if plan[0] != "PRIMARY" or plan[1] not in lookups
    }
    assert scans == {}


def _waiting(db: Db) -> bool:
    """A statement on this test's tables waits for a lock."""
    with db.engine.connect() as connection:
        waits = connection.execute(
            text(
                "SELECT COUNT(*) FROM information_schema.innodb_trx "
                "WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE :table"
            ),
            {"table": f"%{db.table}%"},
        )
        return bool(waits.scalar_one())


async def _ended_or_waiting(db: Db, task: asyncio.Task[Any]) -> None:
    # Polled slowly: InnoDB refreshes what innodb_trx shows only once it has gone unread for
    # a tenth of a second.
    deadline = time.monotonic() + 10
    while not task.done() and not await asyncio.to_thread(_waiting, db):
        assert time.monotonic() < deadline, "the purge neither ended nor waited"
        await asyncio.sleep(0.2)


def test_the_purge_deletes_idle_keys_beside_one_a_writer_holds_and_never_waits_for_it(
    mysql_db: Db,
) -> None:
    """k:a, k:c and k:d are idle (sent, and their rows gone: a purge deleted them and stopped
    before their key rows); k:b among them is held by a writer whose transaction goes on and
    next adds a row for k:a. The purge deletes the idle three by key and never asks for k:b;
    the writer waits for the purge's k:a and numbers it anew once the purge is done.

    Before, one ``DELETE … IN ('k:a', 'k:c', 'k:d')`` scanned the four key rows and waited
    for k:b while it held k:a: with the writer asking for k:a, a deadlock, every time."""
    db = mysql_db
    publisher = Recording()
    with db.engine.begin() as connection:
        for key in ("k:a", "k:b", "k:c", "k:d"):
            _add(db, connection, key)
    writer = db.engine.connect()

    async def main() -> None:
        async with Relay(db.engine, publisher, table=db.table, listen=False) as relay:
            assert (await relay.run_once()).sent == 4  # and the purge kept everything
            with db.engine.begin() as connection:
                connection.execute(text(f"DELETE FROM {db.table} WHERE aggregateid <> 'k:b'"))
            await asyncio.to_thread(_add, db, writer, "k:b")  # held from here on
            purge = asyncio.create_task(relay.purge())
            await _ended_or_waiting(db, purge)
            await asyncio.to_thread(_add, db, writer, "k:a")  # waits for the purge, if it holds k:a
            await asyncio.wait_for(purge, 10)
            await asyncio.to_thread(writer.commit)
            assert (await relay.batch()).sent == 2

    try:
        asyncio.run(main())
    finally:
        writer.close()
    assert {key["aggregateid"]: key["last_seq"] for key in db.key_rows()} == {"k:a": 1, "k:b": 2}
    assert sorted(m.key or "" for m in publisher.sent) == ["k:a", "k:a", "k:b", "k:b", "k:c", "k:d"]


def _paused(op: Any, pause: Callable[[], None]) -> Any:
    """``op`` with ``pause()`` run once its first statement has answered."""
    stmt = next(op)
    reply = yield stmt
    pause()
    while True:
        try:
            stmt = op.send(reply)
        except StopIteration as stop:
            return stop.value
        reply = yield stmt


@pytest.mark.slow
@pytest.mark.parametrize("nowait", [True, False], ids=["nowait", "skip-locked"])
def test_a_write_back_beside_a_writer_that_waits_for_it_asks_for_no_row_the_writer_holds(
    mysql_db: Db, nowait: bool
) -> None:
    """The interleaving of the two-relay storm's deadlock, made to last. A batch of 20 keys is
    written back; a writer holds k:x (not in the batch), having changed its row 100,000 times,
    and waits for k:05, which the write-back has locked. Other transactions keep starting to
    wait for k:07, each starting a deadlock search. The write-back's changes go by key, so it
    never asks for k:x: no cycle, and it commits.

    Before, its ``UPDATE … IN (…)`` scanned the key table and queued for k:x while it read the
    row's last committed version, 100,000 versions back: a search in that time found the
    write-back and the writer waiting on each other, and InnoDB rolled back the lighter (here
    the write-back; in the storm, often the writer)."""
    db = mysql_db
    q = Queries("mariadb" if nowait else "mysql", db.table, nowait=nowait)
    keys = q.keys
    batch = [f"k:{n:02d}" for n in range(20)]
    with db.engine.begin() as connection:
        for key in [*batch, "k:x"]:
            _add(db, connection, key)
        connection.execute(
            text(
                f"UPDATE {keys} SET claimed_by = 'batch', claimed_until = :until "
                "WHERE aggregateid <> 'k:x'"
            ),
            {"until": time.time() + 60},
        )
    writer = db.engine.connect()
    writer.exec_driver_sql(
        f"INSERT INTO {keys} (aggregateid, last_seq) VALUES "
        + ", ".join(["('k:x', 1)"] * 100_000)
        + " ON DUPLICATE KEY UPDATE last_seq = last_seq + 1"
    )
    others = create_engine(db.url, poolclass=NullPool)
    threads: list[threading.Thread] = []
    failed: list[BaseException] = []

    def run(work: Callable[[], None]) -> None:
        def guarded() -> None:
            try:
                work()
            except BaseException as exc:
                failed.append(exc)

        threads.append(threading.Thread(target=guarded))
        threads[-1].start()

    def wait_for_k07(delay: float) -> None:
        with others.connect() as connection:
            time.sleep(delay)
            connection.execute(
                text(f"SELECT aggregateid FROM {keys} WHERE aggregateid = 'k:07' FOR UPDATE")
            )
            connection.rollback()

    def writer_waits() -> None:
        run(lambda: _add(db, writer, "k:05"))
        deadline = time.monotonic() + 10
        while not _waiting(db):
            assert time.monotonic() < deadline, "the writer never waited for k:05"
            time.sleep(0.2)  # innodb_trx is refreshed once unread for 0.1 s
        for n in range(25):
            run(functools.partial(wait_for_k07, 0.002 * n))

    relay = db.engine.connect().execution_options(isolation_level="READ COMMITTED")
    try:
        site = Site(relay)
        site.open(savepoint=False)
        left = site.run(_paused(settle_keys(q, "batch", batch, ()), writer_waits))
        site.commit()
        for thread in threads:
            thread.join(30)
    finally:
        relay.close()
        writer.rollback()
        writer.close()
        others.dispose()
    assert (left, failed) == ([], [])
