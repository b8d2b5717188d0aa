"""A write-back never waits for a writer's key row while it holds another key row.

A business transaction that adds rows for two keys holds the first key's row until it
commits. If the relay's write-back locked the second key and then waited for the first, the
two would wait on each other: the database kills one, and InnoDB picks the writer (less work
to undo), so a business transaction failed because a relay was running. The write-back now
skips the key rows a writer holds and settles them once the writer is done.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from mideng.db.dialect import retryable
from mideng.outbox import Relay
from tests.outbox.conftest import Db
from tests.outbox.recording import Recording


def deadlocks(db: Db) -> int:
    """The server's own count of deadlocks it broke, since it started."""
    with db.engine.connect() as connection:
        if db.name == "mysql":
            row = connection.execute(text("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")).one()
            return int(row[1])
        return int(
            connection.execute(
                text("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
            ).scalar_one()
        )


def _add(db: Db, connection: Any, key: str) -> None:
    db.outbox.add(connection, "orders", {"key": key, "n": 2}, key=key)


def _key(db: Db, key: str) -> Any:
    return next(row for row in db.key_rows() if row["aggregateid"] == key)


async def _until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


async def _past_the_held_key(
    db: Db, relay: Relay, publisher: Recording, writer: Any
) -> asyncio.Task[Any]:
    """A batch of k:a and k:b whose write-back starts while ``writer`` holds k:b's row (its
    transaction goes on): returned running, once k:a is settled. A write-back that locked k:a
    and then waited for k:b would hold k:a here."""
    batch = asyncio.create_task(relay.batch())
    await _until(
        lambda: all(key["claimed_by"] is not None for key in db.key_rows()),
        "the batch never leased both keys",
    )
    await asyncio.to_thread(_add, db, writer, "k:b")
    assert publisher.held is not None
    publisher.held.set()  # both rows published; the write-back starts
    await _until(
        lambda: _key(db, "k:a")["claimed_by"] is None,
        "the write-back held k:a while it waited for the writer's k:b",
    )
    return batch


def _two_keys(db: Db) -> Recording:
    """A row each for k:a and k:b, and a publisher that holds publishes until told."""
    with db.engine.begin() as connection:
        for key in ("k:a", "k:b"):
            db.outbox.add(connection, "orders", {"key": key, "n": 1}, key=key)
    publisher = Recording()
    publisher.held = asyncio.Event()
    return publisher


def test_a_writer_holding_one_of_a_batchs_keys_and_taking_another_is_never_a_victim(
    server_db: Db,
) -> None:
    db = server_db
    publisher = _two_keys(db)
    before = deadlocks(db)
    writer = db.engine.connect()

    async def main() -> Any:
        async with Relay(db.engine, publisher, table=db.table, listen=False, lease=30) as relay:
            batch = await _past_the_held_key(db, relay, publisher, writer)
            assert _key(db, "k:b")["claimed_by"] is not None  # skipped, still leased
            # Now the writer takes k:a too, which a waiting write-back would have held.
            await asyncio.to_thread(_add, db, writer, "k:a")
            await asyncio.to_thread(writer.commit)
            done = await asyncio.wait_for(batch, 10)
            assert all(key["claimed_by"] is None for key in db.key_rows())  # k:b settled too
            return done, await relay.run_once()

    try:
        first, second = asyncio.run(main())
    finally:
        writer.close()
    assert (first.sent, second.sent) == (2, 2)
    published = sorted((m.key, json.loads(m.body)["n"]) for m in publisher.sent)
    assert published == [("k:a", 1), ("k:a", 2), ("k:b", 1), ("k:b", 2)]
    assert all(row["state"] == 1 for row in db.rows())
    assert all(key["pending"] == 0 and key["sent_seq"] == 2 for key in db.key_rows())
    assert deadlocks(db) == before


@pytest.mark.slow
def test_writers_of_two_keys_each_beside_two_relays_meet_no_deadlock(server_db: Db) -> None:
    """600 transactions from 8 threads, each adding rows for two keys (in one order, so that
    writers cannot deadlock among themselves), while two relays publish: no transaction
    fails, every row is published once, each key's in order. PostgreSQL breaks no deadlock at
    all. InnoDB can still break one between the two relays' own statements (its locks on the
    keys' secondary index entries), which the relay retries: there, no writer is a victim."""
    db = server_db
    keys, transactions, threads = 25, 600, 8
    failed: list[BaseException] = []
    before = deadlocks(db)

    def write(worker: int) -> None:
        rng = random.Random(worker)
        for i in range(transactions // threads):
            pair = sorted(rng.sample(range(keys), 2))
            try:
                with db.engine.begin() as connection:
                    for k in pair:
                        db.outbox.add(
                            connection, "orders", {"w": worker, "i": i, "k": k}, key=f"order:{k}"
                        )
            except DBAPIError as exc:
                if exc.orig is None or not retryable(exc.orig):
                    raise
                failed.append(exc)

    publisher = Recording(delay=0.0005)

    async def main() -> None:
        stop = asyncio.Event()
        relays = [Relay(db.engine, publisher, table=db.table, poll=0.01) for _ in range(2)]
        try:
            for relay in relays:
                await relay.start()
            running = [asyncio.create_task(relay.run(stop)) for relay in relays]
            workers = [threading.Thread(target=write, args=(w,)) for w in range(threads)]
            try:
                for thread in workers:
                    thread.start()
                for thread in workers:
                    await asyncio.to_thread(thread.join)
            finally:
                stop.set()
                await asyncio.gather(*running)
            await relays[0].run_once()
        finally:
            for relay in relays:
                await relay.close()

    asyncio.run(main())
    assert failed == []
    if db.name == "postgresql":
        assert deadlocks(db) == before
    rows = db.rows()
    assert len(rows) == transactions // threads * threads * 2
    assert all(row["state"] == 1 for row in rows)
    assert sorted(m.message_id for m in publisher.sent) == sorted(row["id"] for row in rows)
    seq: dict[str, list[int]] = {}
    by_id = {row["id"]: row for row in rows}
    for message in publisher.sent:
        seq.setdefault(message.key or "", []).append(by_id[message.message_id]["seq"])
    assert all(s == sorted(s) for s in seq.values())


def test_a_failed_write_back_of_a_held_key_is_tried_again(
    server_db: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The later write-back of a key a writer held fails once (the connection drops): it is
    tried again within the lease, and the batch ends with every key let go."""
    db = server_db
    publisher = _two_keys(db)
    writer = db.engine.connect()
    real = Relay._transact
    broken: list[str] = []

    async def failing(self: Relay, make: Any, *args: Any, **options: Any) -> Any:
        if make().__name__ == "settle_keys" and not broken:
            broken.append("settle_keys")
            raise ConnectionError("database gone during a held key's write-back")
        return await real(self, make, *args, **options)

    monkeypatch.setattr(Relay, "_transact", failing)

    async def main() -> Any:
        async with Relay(db.engine, publisher, table=db.table, listen=False, lease=30) as relay:
            batch = await _past_the_held_key(db, relay, publisher, writer)
            await asyncio.to_thread(writer.commit)
            return await asyncio.wait_for(batch, 10)

    try:
        done = asyncio.run(main())
    finally:
        writer.close()
    assert broken == ["settle_keys"]
    assert done.sent == 2
    assert all(key["claimed_by"] is None for key in db.key_rows())
    assert {key["aggregateid"]: key["pending"] for key in db.key_rows()} == {"k:a": 0, "k:b": 1}


@pytest.fixture
def pg_db(tmp_path: Any) -> Any:
    from tests.outbox.conftest import drop, open_db

    db = open_db("postgresql", tmp_path)
    yield db
    drop(db)


def test_the_purge_skips_an_idle_key_a_writer_holds_instead_of_waiting(pg_db: Db) -> None:
    """Retention has removed every row of two keys, so the purge deletes their key rows. A
    writer holds one of them (its transaction added a row and goes on): the purge deletes the
    other and finishes at once, rather than hold the first while it waits for the second.

    PostgreSQL only: on a table this small InnoDB scans the whole rows table to delete the
    sent rows, so there the purge waits for the writer's new row first (holding only rows no
    writer ever locks: a wait, never a cycle)."""
    db = pg_db
    with db.engine.begin() as connection:
        for key in ("k:a", "k:b"):
            db.outbox.add(connection, "orders", {"key": key, "n": 1}, key=key)
    publisher = Recording()
    writer = db.engine.connect()
    before = deadlocks(db)

    async def main() -> None:
        async with Relay(db.engine, publisher, table=db.table, listen=False, retention=0) as relay:
            assert (await relay.run_once()).sent == 2  # published, then purged: no rows left
            assert db.key_rows() == []
            for key in ("k:a", "k:b"):
                await asyncio.to_thread(_add, db, writer, key)
            await asyncio.to_thread(writer.commit)
            assert (await relay.batch()).sent == 2
            await asyncio.to_thread(_add, db, writer, "k:b")  # held from here on
            await asyncio.wait_for(relay.purge(), 5)
            assert [key["aggregateid"] for key in db.key_rows()] == ["k:b"]
            await asyncio.to_thread(writer.commit)
            assert (await relay.batch()).sent == 1

    try:
        asyncio.run(main())
    finally:
        writer.close()
    assert [row["seq"] for row in db.rows()] == [2]  # k:b numbered on from its new key row
    assert deadlocks(db) == before


def test_a_key_left_pending_with_nothing_to_publish_is_let_go_at_once(db: Db) -> None:
    """A relay stopped after writing a batch's rows back but before letting a key go (one a
    writer held) leaves the key marked pending under its lapsed lease, with every row sent.
    The next claim takes the key, finds nothing to publish and lets it go at once, so the
    key's next row is published by the next batch instead of waiting out another lease."""
    with db.engine.begin() as connection:
        db.outbox.add(connection, "orders", {"key": "k:a", "n": 1}, key="k:a")
    publisher = Recording()

    async def main() -> None:
        async with Relay(db.engine, publisher, table=db.table, listen=False, lease=30) as relay:
            assert (await relay.batch()).sent == 1
            with db.engine.begin() as connection:
                connection.execute(
                    text(
                        f"UPDATE {db.table}_keys SET pending = 1, claimed_by = 'stopped', "
                        "claimed_until = :lapsed"
                    ),
                    {"lapsed": time.time() - 1},
                )
            assert (await relay.batch()).claimed == 0
            assert [(key["pending"], key["claimed_by"]) for key in db.key_rows()] == [(0, None)]
            with db.engine.begin() as connection:
                _add(db, connection, "k:a")
            assert (await relay.batch()).sent == 1

    asyncio.run(main())
    assert [json.loads(m.body)["n"] for m in publisher.sent] == [1, 2]
