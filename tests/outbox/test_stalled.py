"""A relay stopped (SIGSTOP) in the middle of its publishes until its lease lapses: a second
relay takes its keys over, publishes every row and marks it sent. When the first one resumes,
the publishes it had in flight count as failed (their lease is over), and its write-back of
them must change nothing: the rows are the second relay's now.

Before, the failure write-back named its rows by id alone and put the second relay's sent rows
back to pending with the first one's ``TimeoutError``: below their key's mark, where no relay
publishes them again, no purge deletes them and the pending count never drains. (An unkeyed
row went back to pending too, and was published a second time.)"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mideng.outbox import Relay
from tests.brokers import AMQP_URL, BrokerNames
from tests.outbox.conftest import Db, declare_queue
from tests.outbox.relay_proc import spawn

pytestmark = pytest.mark.slow

KEYS, PER_KEY, UNKEYED = 6, 3, 2
LEASE = 1.0
DELAY = 0.2  # each of the stopped relay's publishes: the first ones are in flight at its stop


def _wait_for(what: str, done: Callable[[], object], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_stalled_relays_write_back_changes_nothing_another_relay_sent(
    db: Db, broker_names: BrokerNames, tmp_path: Path
) -> None:
    queue = broker_names.rabbitmq_queue()
    declare_queue(queue)
    with db.engine.begin() as connection:
        for n in range(PER_KEY):
            for k in range(KEYS):
                db.outbox.add(connection, queue, {"k": k, "n": n}, key=f"order:{k}")
        for n in range(UNKEYED):
            db.outbox.add(connection, queue, {"n": n})
    log, errors = tmp_path / "stalled.log", tmp_path / "stalled.err"
    url = db.engine.url.render_as_string(hide_password=False)
    with errors.open("wb") as stderr:
        stalled = spawn(url, AMQP_URL, db.table, log, LEASE, DELAY, stderr=stderr)
    try:
        # In the middle of its batch: its first publishes are on their way to the broker.
        _wait_for("the relay never published", lambda: log.exists() and log.read_text())
        stalled.send_signal(signal.SIGSTOP)

        async def take_over() -> None:
            # Nothing is free until the stopped relay's lease lapses.
            async with Relay(db.engine, AMQP_URL, table=db.table, listen=False) as relay:
                deadline = time.monotonic() + 30
                while db.rows("state <> 1"):
                    assert time.monotonic() < deadline, "the second relay never took over"
                    await relay.run_once()
                    await asyncio.sleep(0.05)

        asyncio.run(take_over())
        stalled.send_signal(signal.SIGCONT)
        # Its publishes in flight end as failed, and are written back (then logged).
        _wait_for(
            "the resumed relay wrote nothing back", lambda: b"TimeoutError" in errors.read_bytes()
        )
    finally:
        stalled.send_signal(signal.SIGCONT)
        stalled.send_signal(signal.SIGTERM)
        assert stalled.wait(30) == 0
    rows = db.rows()
    assert len(rows) == KEYS * PER_KEY + UNKEYED
    assert [(row["state"], row["attempts"], row["last_error"]) for row in rows] == [
        (1, 0, None)
    ] * len(rows)
    for key in db.key_rows():
        assert (key["sent_seq"], key["pending"], key["claimed_by"]) == (PER_KEY, 0, None)
