"""One call of the relay fails, or one row is odd: the failure stays with that row or that
batch. A row whose stored headers no publish can carry fails (and dies) on its own, without
stopping the keys claimed beside it."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import create_async_engine

from mideng.messaging.publish import Outgoing
from mideng.outbox import Backoff, Relay
from mideng.outbox.engines import async_url
from tests.outbox.conftest import Db, drop, fill, open_db
from tests.outbox.recording import Recording

#: sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER (named in Python 3.11): binds a statement takes.
LIMIT_VARIABLES = 9


def _relay(db: Db, publisher: Any, engine: Any = None, **options: Any) -> Relay:
    options.setdefault("listen", False)
    return Relay(engine or db.engine, publisher, table=db.table, **options)


def test_a_row_whose_headers_are_not_a_json_object_fails_alone(db: Db) -> None:
    # Rows written beside add() (another service, a migration, a hand-made fix) may hold
    # headers the relay cannot read. Read at claim time, one such row failed every claim
    # that met it, and the keys leased beside it were claimed again with it, never sent.
    ids = fill(db, keys=4, per_key=2, unkeyed=2)
    odd = {ids[0]: "not json", ids[8]: "[]", ids[1]: '{"n": 1}'}  # order:0 and order:1 first
    with db.engine.begin() as connection:
        for row_id, headers in odd.items():
            connection.execute(
                text(f"UPDATE {db.table} SET headers = :headers WHERE id = :id"),
                {"headers": headers, "id": row_id},
            )
        # A body stored as text (SQLite keeps a text value in a BLOB column as text).
        connection.execute(
            text(f"UPDATE {db.table} SET payload = :body WHERE id = :id"),
            {"body": '{"k":2,"n":0}', "id": ids[2]},
        )
    publisher = Recording()

    async def main() -> Any:
        async with _relay(db, publisher, max_attempts=1) as relay:
            return await relay.run_once()

    total = asyncio.run(main())
    assert sorted(message.message_id for message in publisher.sent) == sorted(set(ids) - set(odd))
    assert (total.failed, total.dead) == (3, 3)
    rows = {row["id"]: row for row in db.rows()}
    assert {row_id for row_id, row in rows.items() if row["state"] == 2} == set(odd)
    assert all("headers" in rows[row_id]["last_error"] for row_id in odd)
    (text_body,) = [m for m in publisher.sent if m.message_id == ids[2]]
    assert json.loads(text_body.body) == {"k": 2, "n": 0}
    assert text_body.headers["message-id"] == ids[2]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="sqlite3's setlimit() is Python 3.11's")
def test_a_batch_larger_than_a_statement_takes_binds_is_written_back(tmp_path: Path) -> None:
    # SQLite before 3.32 takes at most 999 binds in a statement (and MySQL 65,535). A batch
    # sent more rows than that, and its write-back named every one in one list: the database
    # refused it every time, and the batch was published again each time its lease lapsed.
    db = open_db("sqlite", tmp_path)
    ids = fill(db, keys=10, per_key=60, unkeyed=600)

    async def main() -> Any:
        engine = create_async_engine(
            async_url(db.engine.url), connect_args={"check_same_thread": False}
        )

        @event.listens_for(engine.sync_engine, "connect")
        def old_sqlite(connection: Any, record: Any) -> None:
            sqlite = connection.driver_connection._conn
            sqlite.setlimit(LIMIT_VARIABLES, 999)

        try:
            async with _relay(db, publisher, lease=1.0, engine=engine) as relay:
                return await asyncio.wait_for(relay.run_once(), 60)
        finally:
            await engine.dispose()

    publisher = Recording()
    try:
        total = asyncio.run(main())
        rows = db.rows()
    finally:
        drop(db)
    assert total.sent == len(ids) == len(publisher.sent)
    assert sorted(message.message_id for message in publisher.sent) == sorted(ids)
    assert all(row["state"] == 1 for row in rows)


class Silent(Recording):
    """A broker that never answers one key's publishes (a connection gone quiet: no error,
    no confirm), and takes every other."""

    def __init__(self) -> None:
        super().__init__()
        self.unanswered = 0
        self.again = asyncio.Event()  # set at the second publish left unanswered

    async def publish(self, message: Outgoing) -> None:
        if message.key == "order:0":
            self.unanswered += 1
            if self.unanswered == 2:
                self.again.set()
            await asyncio.Event().wait()
        await super().publish(message)


def test_a_publish_never_confirmed_ends_with_its_lease(db: Db) -> None:
    # A publish that never returned held its batch, and the relay with it, for good: no
    # write-back of what the batch had sent, no stop, and once the lease lapsed the key went
    # to another batch while this one's publish could still land.
    ids = fill(db, keys=3, per_key=2)
    publisher = Silent()

    async def main() -> Any:
        options = {"lease": 1.0, "depth": 1, "poll": 0.05, "backoff": Backoff(first=0.1)}
        async with _relay(db, publisher, **options) as relay:
            first = await asyncio.wait_for(relay.run_once(), 20)
            # And a relay asked to stop while such a publish is in flight does stop.
            stop = asyncio.Event()
            task = asyncio.create_task(relay.run(stop))
            await asyncio.wait_for(publisher.again.wait(), 20)  # order:0's, in flight again
            stop.set()
            await asyncio.wait_for(task, 20)
            return first

    first = asyncio.run(main())
    assert (first.sent, first.failed) == (4, 1)
    assert sorted(m.message_id for m in publisher.sent) == sorted(i for i in ids[1:] if i != ids[3])
    rows = {row["id"]: row for row in db.rows()}
    assert (rows[ids[0]]["attempts"], rows[ids[0]]["state"]) == (2, 0)
    assert "TimeoutError" in rows[ids[0]]["last_error"]
    assert all(key["claimed_by"] is None for key in db.key_rows())
