"""The relay against a recording publisher: order, retries, dead rows, faults, two relays,
purge and the NOTIFY wake-up."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from typing import Any

import pytest
from sqlalchemy import text

from mideng.messaging.publish import Outgoing
from mideng.outbox import Backoff, Left, Relay
from tests.outbox.conftest import Db, fill
from tests.outbox.recording import Recording


def _relay(db: Db, publisher: Any, **options: Any) -> Relay:
    options.setdefault("listen", False)
    return Relay(db.engine, publisher, table=db.table, **options)


def _in_order(sent: list[Outgoing]) -> bool:
    """Each key's first arrivals come in the order they were written."""
    seen: dict[str, list[int]] = {}
    first = set()
    for message in sent:
        if message.message_id in first:
            continue
        first.add(message.message_id)
        if message.key is not None:
            seen.setdefault(message.key, []).append(json.loads(message.body)["n"])
    return all(ns == sorted(ns) for ns in seen.values())


def test_everything_committed_is_published_once_in_key_order(db: Db) -> None:
    ids = fill(db, keys=7, per_key=6, unkeyed=5)
    publisher = Recording()

    async def main() -> Any:
        async with _relay(db, publisher, batch_keys=3, batch_rows=4) as relay:
            return await relay.run_once()

    total = asyncio.run(main())
    assert sorted(message.message_id for message in publisher.sent) == sorted(ids)
    assert total.sent == len(ids)
    assert _in_order(publisher.sent)
    assert all(row["state"] == 1 for row in db.rows())
    assert all(key["pending"] == 0 and key["claimed_by"] is None for key in db.key_rows())
    for message in publisher.sent:
        assert message.headers["message-id"] == message.message_id
        assert message.headers.get("idempotency-key") == message.key


def test_a_failed_publish_backs_off_and_holds_the_rest_of_its_key(db: Db) -> None:
    fill(db, keys=2, per_key=3)
    failures = Counter[str]()

    def fail_once(message: Outgoing) -> bool:
        first = json.loads(message.body) == {"k": 0, "n": 0} and not failures
        if first:
            failures[message.message_id] += 1
        return first

    publisher = Recording(fail=fail_once)

    async def main() -> None:
        async with _relay(db, publisher, backoff=Backoff(first=0.3)) as relay:
            first = await relay.run_once()
            assert (first.sent, first.failed) == (3, 1)  # order:1 went on without order:0
            assert [m.key for m in publisher.sent] == ["order:1"] * 3
            again = await relay.run_once()  # within the backoff: order:0 is not due yet
            assert again.sent == 0
            await asyncio.sleep(0.4)
            later = await relay.run_once()
            assert later.sent == 3

    asyncio.run(main())
    assert [json.loads(m.body)["n"] for m in publisher.sent if m.key == "order:0"] == [0, 1, 2]
    (failed,) = [row for row in db.rows() if row["attempts"]]
    assert failed["attempts"] == 1
    assert "ConnectionError" in failed["last_error"]


def test_a_row_is_dead_after_its_last_attempt_and_its_key_goes_on(db: Db) -> None:
    fill(db, keys=1, per_key=3)
    publisher = Recording(fail=lambda message: json.loads(message.body)["n"] == 1)

    async def main() -> None:
        async with _relay(db, publisher, max_attempts=2, backoff=Backoff(first=0.01)) as relay:
            totals = []
            for _ in range(3):
                totals.append(await relay.run_once())
                await asyncio.sleep(0.05)
            assert sum(total.dead for total in totals) == 1

    asyncio.run(main())
    assert [json.loads(m.body)["n"] for m in publisher.sent] == [0, 2]
    states = {json.loads(row["payload"])["n"]: row["state"] for row in db.rows()}
    assert states == {0: 1, 1: 2, 2: 1}


@pytest.mark.parametrize("step", ["claim", "settle"])
def test_a_database_failure_loses_nothing_and_repeats_the_same_ids(db: Db, step: str) -> None:
    ids = fill(db, keys=3, per_key=2, unkeyed=2)
    publisher = Recording()

    async def main() -> None:
        relay = _relay(db, publisher, lease=0.5)
        real = relay._transact
        calls = Counter[str]()

        def broken(op: Any) -> Any:
            """The operation's first statement runs, then the connection drops."""
            yield next(op)
            raise ConnectionError(f"database gone during {step}")

        async def failing(make: Any, retries: int = 0, **options: Any) -> Any:
            name = make().__name__  # the operation's generator function
            calls[name] += 1
            if name == step and calls[name] == 1:
                return await real(lambda: broken(make()), retries, **options)
            return await real(make, retries, **options)

        relay._transact = failing  # type: ignore[method-assign,assignment]
        async with relay:
            with pytest.raises(ConnectionError):
                await relay.batch()
            if step == "settle":  # published, not written back: held until the lease lapses
                assert len(publisher.sent) == len(ids)
                assert (await relay.run_once()).sent == 0
            else:  # what the broken claim leased waits for its lease; the rest goes now
                await relay.run_once()
            await asyncio.sleep(0.6)
            await relay.run_once()

    asyncio.run(main())
    counted = Counter(message.message_id for message in publisher.sent)
    assert set(counted) == set(ids)
    assert set(counted.values()) == ({2} if step == "settle" else {1})
    assert _in_order(publisher.sent)


class Garbled(Recording):
    """A broker whose refusal of one key's rows echoes bytes it got: text with a NUL and a
    lone surrogate, which no text column stores as it is."""

    async def publish(self, message: Outgoing) -> None:
        if message.key == "order:0":
            raise ValueError("refused b\x00dy \udcff")
        await super().publish(message)


def test_a_failure_text_no_column_stores_still_settles_the_batch(db: Db) -> None:
    # The failure's text is written back after the batch published: a text the database
    # refused failed the whole write-back, and every row the batch had sent went out again
    # once its keys' lease lapsed, batch after batch.
    ids = fill(db, keys=3, per_key=2, unkeyed=2)
    publisher = Garbled()

    async def main() -> None:
        async with _relay(db, publisher, lease=0.5, backoff=Backoff(first=60)) as relay:
            for _ in range(2):
                # A write-back refused raises here; the relay's run loop logs it and goes on.
                with contextlib.suppress(Exception):
                    await relay.run_once()
                await asyncio.sleep(0.6)

    asyncio.run(main())
    counted = Counter(message.message_id for message in publisher.sent)
    assert len(counted) == len(ids) - 2  # order:0's two rows wait for their retry
    assert set(counted.values()) == {1}
    (failed,) = [row for row in db.rows() if row["attempts"]]
    assert failed["aggregateid"] == "order:0"
    assert "ValueError: refused b" in failed["last_error"]


def test_two_relays_at_once_publish_each_row_once_in_key_order(db: Db) -> None:
    ids = fill(db, keys=30, per_key=4, unkeyed=10)
    publisher = Recording(delay=0.001)

    async def main() -> None:
        relays = [_relay(db, publisher, batch_keys=5, batch_rows=8) for _ in range(2)]
        async with relays[0], relays[1]:
            await asyncio.gather(*(relay.run_once() for relay in relays))
            await asyncio.gather(*(relay.run_once() for relay in relays))

    asyncio.run(main())
    assert sorted(message.message_id for message in publisher.sent) == sorted(ids)
    assert _in_order(publisher.sent)


def test_purge_deletes_sent_rows_and_their_keys_but_keeps_dead_ones(db: Db) -> None:
    fill(db, keys=2, per_key=2)
    publisher = Recording(fail=lambda message: message.key == "order:1")

    async def main() -> None:
        async with _relay(db, publisher, retention=0, max_attempts=1) as relay:
            await relay.run_once()
            await relay.purge()

    asyncio.run(main())
    rows = db.rows()
    assert [(row["aggregateid"], row["state"]) for row in rows] == [("order:1", 2)] * 2
    # order:0 is gone, rows and key; order:1's key stays as long as its dead rows do
    assert {key["aggregateid"] for key in db.key_rows()} == {"order:1"}
    with db.engine.begin() as connection:
        db.outbox.add(connection, "orders", {"k": 0, "n": 9}, key="order:0")
    assert [row["seq"] for row in db.rows() if row["aggregateid"] == "order:0"] == [1]


def test_left_counts_the_rows_still_pending_by_why(db: Db) -> None:
    ids = fill(db, keys=2, per_key=2, unkeyed=1)
    failing = {ids[0], ids[4]}  # order:0's first row and the unkeyed one
    held = Recording(fail=lambda message: message.message_id in failing)

    async def main() -> tuple[Left, Left, Left]:
        async with _relay(db, held, backoff=Backoff(first=60.0)) as relay:
            await relay.run_once()
            retrying = await relay.left()  # order:0 behind its failed row, and the unkeyed one
            with db.engine.begin() as connection:
                for n in range(2):
                    db.outbox.add(connection, "orders", {"k": 2, "n": n}, key="order:2")
            other = Recording()
            other.held = asyncio.Event()  # another relay publishing order:2, for now
            async with _relay(db, other) as publishing:
                task = asyncio.create_task(publishing.run_once())
                deadline = time.monotonic() + 20
                while not any(key["claimed_by"] for key in db.key_rows()):
                    assert time.monotonic() < deadline, "order:2 was never claimed"
                    await asyncio.sleep(0.02)
                leased = await relay.left()
                other.held.set()
                await task
            with db.engine.begin() as connection:
                db.outbox.add(connection, "orders", {"k": 3, "n": 0}, key="order:3")
                # A sent row made pending again: below its key's mark, published never again.
                connection.execute(
                    text(f"UPDATE {db.table} SET state = 0 WHERE id = :id"), {"id": ids[1]}
                )
            return retrying, leased, await relay.left()

    began = time.time()
    retrying, leased, last = asyncio.run(main())
    assert retrying._replace(next_at=None) == Left(retrying=3)
    assert retrying.next_at is not None
    assert began + 59 < retrying.next_at < time.time() + 61  # the retry time, a minute on
    assert leased._replace(next_at=None) == Left(retrying=3, leased=2)
    assert last._replace(next_at=None) == Left(due=1, retrying=3, stuck=1)
    assert last.waiting == 4


def test_notify_wakes_the_relay_long_before_its_poll(tmp_path: Any) -> None:
    from tests.outbox.conftest import drop, open_db

    db = open_db("postgresql", tmp_path)
    publisher = Recording()

    async def main() -> float:
        stop = asyncio.Event()
        relay = Relay(db.engine, publisher, table=db.table, poll=60.0)
        async with relay:
            task = asyncio.create_task(relay.run(stop))
            await asyncio.sleep(0.3)  # the relay is waiting now
            start = time.monotonic()
            await asyncio.to_thread(fill, db, 1, 1)
            await asyncio.wait_for(publisher.published.wait(), 20)
            waited = time.monotonic() - start
            stop.set()
            await asyncio.wait_for(task, 5)
        return waited

    try:
        waited = asyncio.run(main())
    finally:
        drop(db)
    assert len(publisher.sent) == 1
    assert waited < 10  # a poll would take 60 s
