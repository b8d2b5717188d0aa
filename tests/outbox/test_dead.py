"""Dead rows listed and requeued (mideng.outbox.dead) on SQLite, PostgreSQL and MariaDB:
requeued only while still dead after the attempts seen, back at its place in its key."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sys
from collections import Counter as Tally
from typing import Any

import pytest

from mideng.core.answers import Changed, Done, Gone
from mideng.messaging.publish import Outgoing
from mideng.outbox import Backoff, Relay
from mideng.outbox.dead import (
    SeenRow,
    adead_rows,
    arequeue,
    dead_rows,
    requeue,
)
from tests.outbox.conftest import Db, fill
from tests.outbox.recording import Recording
from tests.outbox.requeuer import requeue_all


def _batch(db: Db, publisher: Any, **options: Any) -> Any:
    async def main() -> Any:
        async with Relay(
            db.engine, publisher, table=db.table, listen=False, backoff=Backoff(0.0), **options
        ) as relay:
            return await relay.batch()

    return asyncio.run(main())


def _killed(db: Db, ids: set[str]) -> None:
    """The rows ``ids`` published once and dead (max_attempts 1); the rest of their keys sent."""
    publisher = Recording(fail=lambda message: message.message_id in ids)
    _batch(db, publisher, max_attempts=1)
    _batch(db, publisher, max_attempts=1)  # the keys' rows behind them, the key moved on


def _states(db: Db) -> dict[str, int]:
    return {row["id"]: row["state"] for row in db.rows()}


def test_dead_rows_are_listed_with_their_error(db: Db) -> None:
    ids = fill(db, keys=2, per_key=3)  # order:0 n0, order:1 n0, order:0 n1, ...
    _killed(db, {ids[0]})
    (row,) = dead_rows(db.engine, table=db.table)
    assert (row.id, row.destination, row.key, row.seq, row.state) == (
        ids[0],
        "orders",
        "order:0",
        1,
        2,
    )
    assert row.attempts == 1
    assert row.error is not None
    assert "broker refused" in row.error
    assert row.age(row.created_at + 5) == 5
    assert dead_rows(db.engine, table=db.table, destination="elsewhere") == []
    assert [r.id for r in dead_rows(db.engine, table=db.table, destination="orders")] == [ids[0]]
    # The dead row held nothing up: its key's rows behind it were sent.
    assert _states(db)[ids[2]] == _states(db)[ids[4]] == 1


def test_dry_run_says_what_would_be_requeued_and_changes_nothing(db: Db) -> None:
    ids = fill(db, keys=1, per_key=2)
    _killed(db, {ids[0]})
    (row,) = dead_rows(db.engine, table=db.table)
    answers = requeue(
        db.engine, [row.seen, SeenRow("no-such-row", 1)], table=db.table, dry_run=True
    )
    assert answers == {row.id: Done(row), "no-such-row": Gone()}
    assert dead_rows(db.engine, table=db.table) == [row]


def test_requeued_row_is_published_once_more_and_not_its_key_s_sent_rows(db: Db) -> None:
    ids = fill(db, keys=1, per_key=3)
    _killed(db, {ids[0]})
    (row,) = dead_rows(db.engine, table=db.table)
    answer = requeue(db.engine, [row.seen], table=db.table)[row.id]
    assert isinstance(answer, Done)
    assert (answer.now.state, answer.now.attempts) == (0, 0)
    assert dead_rows(db.engine, table=db.table) == []
    publisher = Recording()
    total = _batch(db, publisher)
    assert [m.message_id for m in publisher.sent] == [ids[0]]
    assert total.sent == 1
    assert set(_states(db).values()) == {1}


def test_requeued_row_goes_first_and_its_key_waits_behind_it(db: Db) -> None:
    ids = fill(db, keys=1, per_key=1)
    _killed(db, {ids[0]})
    later = fill(db, keys=1, per_key=2)  # written after it died, still pending
    (row,) = dead_rows(db.engine, table=db.table)
    assert isinstance(requeue(db.engine, [row.seen], table=db.table)[row.id], Done)
    failing = Recording(fail=lambda message: message.message_id == ids[0])
    _batch(db, failing)
    assert failing.sent == []  # it failed again: the rows behind it waited
    assert _states(db) == {ids[0]: 0, later[0]: 0, later[1]: 0}
    publisher = Recording()
    _batch(db, publisher)
    assert [m.message_id for m in publisher.sent] == [ids[0], *later]


def test_requeue_after_another_operator_is_changed(db: Db) -> None:
    ids = fill(db, keys=1, per_key=1, unkeyed=1)
    _killed(db, set(ids))
    seen = [row.seen for row in dead_rows(db.engine, table=db.table)]
    assert all(isinstance(a, Done) for a in requeue(db.engine, seen, table=db.table).values())
    again = requeue(db.engine, seen, table=db.table)
    assert all(isinstance(a, Changed) and a.now.state == 0 for a in again.values())


def test_requeue_after_the_relay_published_it_is_changed(db: Db) -> None:
    # Seen dead; meanwhile another operator requeued it and a relay published it.
    ids = fill(db, keys=1, per_key=1)
    _killed(db, {ids[0]})
    (row,) = dead_rows(db.engine, table=db.table)
    requeue(db.engine, [row.seen], table=db.table)
    _batch(db, Recording())
    answer = requeue(db.engine, [row.seen], table=db.table)[row.id]
    assert isinstance(answer, Changed)
    assert answer.now.state == 1


def test_requeue_after_it_died_again_with_more_attempts_is_changed(db: Db) -> None:
    ids = fill(db, keys=0, per_key=0, unkeyed=1)
    _killed(db, {ids[0]})
    (row,) = dead_rows(db.engine, table=db.table)
    answer = requeue(db.engine, [SeenRow(row.id, row.attempts + 1)], table=db.table)[row.id]
    assert answer == Changed(row)


def test_async_list_and_requeue_from_a_url(db: Db) -> None:
    ids = fill(db, keys=1, per_key=1)
    _killed(db, {ids[0]})

    async def main() -> Any:
        rows = await adead_rows(db.url, table=db.table)
        dry = await arequeue(db.url, [r.seen for r in rows], table=db.table, dry_run=True)
        done = await arequeue(db.engine, [r.seen for r in rows], table=db.table)
        return rows, dry, done

    rows, dry, done = asyncio.run(main())
    assert [r.id for r in rows] == ids
    assert isinstance(dry[ids[0]], Done)
    assert isinstance(done[ids[0]], Done)
    assert _states(db) == {ids[0]: 0}


@pytest.mark.slow
def test_threads_and_processes_requeue_each_row_once(
    db: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = fill(db, keys=10, per_key=2, unkeyed=10)
    _killed(db, set(ids))
    seen = [(r.id, r.attempts) for r in dead_rows(db.engine, table=db.table, limit=1000)]
    assert len(seen) == len(ids)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        procs = pool.starmap_async(requeue_all, [(db.url, db.table, seen, 6)] * 2)
        here = requeue_all(db.url, db.table, seen, 6)
        results = [*procs.get(300), here]
    acted = Tally(row_id for done in results for row_id in done)
    assert set(acted) == set(ids)
    assert [row_id for row_id, n in acted.items() if n != 1] == []
    assert set(_states(db).values()) == {0}
    # Each key's mark went back below its first requeued row: the relay sends all of them.
    publisher = Recording()
    for _ in range(3):
        _batch(db, publisher)
    assert sorted(m.message_id for m in publisher.sent) == sorted(ids)
    by_key: dict[str | None, list[Outgoing]] = {}
    for message in publisher.sent:
        by_key.setdefault(message.key, []).append(message)
    order = {row_id: n for n, row_id in enumerate(ids)}
    for key, messages in by_key.items():
        if key is not None:
            assert [order[m.message_id] for m in messages] == sorted(
                order[m.message_id] for m in messages
            )
