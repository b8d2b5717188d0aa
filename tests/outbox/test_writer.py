"""Outbox.add / aadd: a row exists exactly when the caller's transaction committed."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session

from mideng.context import request_id_scope
from mideng.errors import ConfigurationError
from mideng.outbox import Outbox, Relay
from mideng.outbox.engines import async_url
from tests.outbox.conftest import Db
from tests.outbox.recording import Recording


def test_only_committed_rows_exist(db: Db) -> None:
    with db.engine.begin() as connection:
        kept = db.outbox.add(connection, "orders", {"order": 1}, key="order:1")
    with db.engine.connect() as connection:
        db.outbox.add(connection, "orders", {"order": 2}, key="order:2")
        connection.rollback()
    with db.engine.connect() as connection:  # autobegun: add() leaves the commit to the caller
        late = db.outbox.add(connection, "orders", {"order": 3})
        connection.commit()
    assert [row["id"] for row in db.rows()] == [kept, late]
    # The rolled-back key took its sequence number back with it.
    assert {row["aggregateid"]: row["last_seq"] for row in db.key_rows()} == {"order:1": 1}


def test_the_row_holds_what_will_be_sent(db: Db) -> None:
    with request_id_scope("req-7"), db.engine.begin() as connection:
        message_id = db.outbox.add(
            connection,
            "payments",
            {"order": "order:9", "amount": 12},
            key="order:9",
            headers={"tenant": "acme"},
            event_type="PaymentCaptured",
        )
    (row,) = db.rows()
    assert row["id"] == message_id
    assert (row["aggregatetype"], row["aggregateid"], row["type"]) == (
        "payments",
        "order:9",
        "PaymentCaptured",
    )
    assert bytes(row["payload"]) == b'{"order":"order:9","amount":12}'
    assert json.loads(row["headers"]) == {
        "tenant": "acme",
        "message-id": message_id,
        "idempotency-key": "order:9",
        "x-request-id": "req-7",
    }
    assert (row["request_id"], row["seq"], row["state"], row["attempts"]) == ("req-7", 1, 0, 0)


def test_every_event_of_one_key_is_its_own_message(db: Db) -> None:
    # The key is the aggregate (ordering), not the event: each row gets its own message id,
    # which is what a consumer dedupes on by default.
    with db.engine.begin() as connection:
        paid = db.outbox.add(connection, "orders", {"event": "paid"}, key="order:3")
        shipped = db.outbox.add(connection, "orders", {"event": "shipped"}, key="order:3")
    assert paid != shipped
    assert paid != "order:3"
    assert sorted(row["id"] for row in db.rows()) == sorted([paid, shipped])


def test_bytes_go_in_as_they_are_and_a_session_works(db: Db) -> None:
    with Session(db.engine) as session, session.begin():
        db.outbox.add(session, "stock", b"\x00\xffraw")
    (row,) = db.rows()
    assert bytes(row["payload"]) == b"\x00\xffraw"
    assert row["aggregateid"] is None
    assert row["seq"] is None


@pytest.mark.parametrize(
    ("destination", "payload", "key", "headers"),
    [
        ("", {}, None, None),
        ("orders", {}, "k" * 256, None),
        ("orders", object(), None, None),
        ("orders", {}, None, {"n": 1}),
        ("orders", {"x": {1, 2}}, "order:1", None),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(
    db: Db, destination: str, payload: object, key: str | None, headers: dict[str, str] | None
) -> None:
    with db.engine.begin() as connection:
        with pytest.raises(ConfigurationError):
            db.outbox.add(connection, destination, payload, key=key, headers=headers)
        # The caller's transaction is untouched and still usable.
        good = db.outbox.add(connection, "orders", {"ok": True}, key="order:1")
    assert [row["id"] for row in db.rows()] == [good]


def test_aadd_writes_in_an_async_transaction(db: Db) -> None:
    async def main() -> list[str]:
        engine = create_async_engine(async_url(db.engine.url))
        outbox = Outbox(engine, table=db.table)
        try:
            async with engine.begin() as connection:
                first = await outbox.aadd(connection, "orders", {"n": 1}, key="order:1")
                second = await outbox.aadd(connection, "orders", {"n": 2}, key="order:1")
            async with engine.connect() as connection:
                await outbox.aadd(connection, "orders", {"n": 3}, key="order:1")
                await connection.rollback()
            return [first, second]
        finally:
            await engine.dispose()

    ids = asyncio.run(main())
    assert [(row["id"], row["seq"]) for row in db.rows()] == [(ids[0], 1), (ids[1], 2)]


@pytest.mark.parametrize("first_commits", [True, False])
def test_a_key_is_numbered_in_commit_order(server_db: Db, first_commits: bool) -> None:
    """A second writer of a key waits for the first to end, so numbers follow commits, and a
    rolled-back first writer leaves no gap."""
    db = server_db
    first_added = threading.Event()
    ended: dict[str, float] = {}

    def first() -> None:
        with db.engine.connect() as connection:
            db.outbox.add(connection, "orders", {"by": "first"}, key="order:1")
            first_added.set()
            time.sleep(0.5)  # long enough for the second writer to be waiting on the key
            ended["first"] = time.monotonic()
            connection.commit() if first_commits else connection.rollback()

    def second() -> None:
        first_added.wait(10)
        with db.engine.connect() as connection:
            db.outbox.add(connection, "orders", {"by": "second"}, key="order:1")
            ended["second_added"] = time.monotonic()
            connection.commit()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert ended["second_added"] >= ended["first"]
    rows = db.rows()
    expected = [("first", 1), ("second", 2)] if first_commits else [("second", 1)]
    assert [(json.loads(row["payload"])["by"], row["seq"]) for row in rows] == expected

    publisher = Recording()
    asyncio.run(_drain(db, publisher))
    assert [body["by"] for body in publisher.bodies()] == [by for by, _ in expected]


def test_a_row_committing_after_a_later_one_is_not_skipped(server_db: Db) -> None:
    """The commit-order gap: a row written first commits last, for a keyed and an unkeyed row;
    the relay publishes what has committed and later the late one, never skipping it."""
    db = server_db
    publisher = Recording()
    with db.engine.connect() as early:
        db.outbox.add(early, "orders", {"n": "early-keyed"}, key="order:1")
        db.outbox.add(early, "orders", {"n": "early-unkeyed"})
        with db.engine.begin() as later:
            db.outbox.add(later, "orders", {"n": "later-keyed"}, key="order:2")
            db.outbox.add(later, "orders", {"n": "later-unkeyed"})
        asyncio.run(_drain(db, publisher))
        assert sorted(body["n"] for body in publisher.bodies()) == ["later-keyed", "later-unkeyed"]
        early.commit()
    asyncio.run(_drain(db, publisher))
    assert sorted(body["n"] for body in publisher.bodies()[2:]) == ["early-keyed", "early-unkeyed"]
    assert len({message.message_id for message in publisher.sent}) == 4


async def _drain(db: Db, publisher: Recording) -> None:
    async with Relay(db.engine, publisher, table=db.table, listen=False) as relay:
        await relay.run_once()
