"""SQLStore batches, statement by statement: a batch claim of new keys is one INSERT (plus the
read MySQL's OK packet needs), a batch completion one UPDATE that fences each row on its own
ticket; a fenced-out row is read once and answered as LeaseLostError, the rest completed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from mideng.core.record import ClaimRequest, Outcome, Status, Ticket
from mideng.errors import LeaseLostError
from mideng.stores.batch import Completion
from mideng.stores.sql import SQLStore
from tests.stores.sql.test_store import (
    SEEN,
    Statements,
    _counting,
    _store,
    claim_family,
    table,
)

__all__ = ["claim_family", "table"]  # the fixtures, shared with test_store


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def counted(claim_family: str, table: str) -> Iterator[tuple[SQLStore, Statements]]:
    store = _store(claim_family, table, connect_args=_counting(claim_family))
    SEEN.seen.clear()
    yield store, SEEN
    store.close()


def req(key: str, lease: float = 30.0) -> ClaimRequest:
    return ClaimRequest("batch", key, uuid.uuid4().hex, lease, 3600.0)


def test_a_batch_completion_is_one_update(counted: tuple[SQLStore, Statements]) -> None:
    store, seen = counted
    claims = store.claim_many([req(f"k{i}") for i in range(20)])
    assert {c.outcome for c in claims} == {Outcome.ACQUIRED}
    seen.seen.clear()
    items = [
        Completion(Ticket.of(c.record), f"{i}".encode(), "json", 60.0) for i, c in enumerate(claims)
    ]
    done = store.complete_many(items)
    assert seen.kinds() == ["UPDATE"]  # one statement for the batch, no read-back
    for i, record in enumerate(done):
        assert not isinstance(record, LeaseLostError)
        assert record.status is Status.SUCCEEDED
        # The row the database holds, to the last bit of every timestamp.
        assert record == store.get("batch", f"k{i}")


def test_a_fenced_out_row_is_refused_alone_and_read_once(
    counted: tuple[SQLStore, Statements],
) -> None:
    store, seen = counted
    asked = [req(f"z{i}", lease=0.3 if i == 3 else 30.0) for i in range(6)]
    claims = store.claim_many(asked)
    time.sleep(0.4)
    taker = store.claim(req("z3"))  # the zombie's lease lapsed: taken over
    assert taker.outcome is Outcome.ACQUIRED
    assert taker.record.fence == 2
    seen.seen.clear()
    items = [Completion(Ticket.of(c.record), b'"r"', "json", 60.0) for c in claims]
    answers = store.complete_many(items)
    # One UPDATE for the batch and one read, for the row it did not complete.
    assert seen.kinds() == ["UPDATE", "SELECT"]
    lost = answers[3]
    assert isinstance(lost, LeaseLostError)
    assert lost.record is not None
    assert (lost.record.owner, lost.record.fence) == (taker.record.owner, 2)
    for i in (0, 1, 2, 4, 5):
        record = answers[i]
        assert not isinstance(record, LeaseLostError)
        assert record == store.get("batch", f"z{i}")
    # The zombie's write changed nothing: the taker still holds the key and settles it.
    assert store.get("batch", "z3") == taker.record
    finished = store.complete(Ticket.of(taker.record), b"t", "json", 60.0)
    assert finished.status is Status.SUCCEEDED


def test_tickets_from_elsewhere_are_completed_and_read_back(claim_family: str, table: str) -> None:
    """A ticket this store did not hand out (another process's claim) has no kept row; its
    completion still lands in the one UPDATE, and the row is read back for the answer."""
    store = _store(claim_family, table)
    other = _store(claim_family, table, create_schema=False)
    try:
        claims = store.claim_many([req(f"e{i}") for i in range(4)])
        stale = Ticket("batch", "e1", "not-the-owner", claims[1].record.fence)
        items = [Completion(Ticket.of(c.record), b"1", "json", None) for c in claims]
        items[1] = Completion(stale, b"1", "json", None)
        answers = other.complete_many(items)
        assert isinstance(answers[1], LeaseLostError)
        for i in (0, 2, 3):
            record = answers[i]
            assert not isinstance(record, LeaseLostError)
            assert record.expires_at is None  # no ttl: never expires
            assert record == store.get("batch", f"e{i}")
        untouched = store.get("batch", "e1")
        assert untouched is not None
        assert untouched.status is Status.PROCESSING
    finally:
        other.close()
        store.close()


@pytest.mark.anyio
async def test_async_batch_completions_answer_the_stored_rows(
    claim_family: str, table: str
) -> None:
    store = _store(claim_family, table)
    claims = await store.aclaim_many([req(f"a{i}") for i in range(10)])
    items = [Completion(Ticket.of(c.record), b"1", "json", 60.0) for c in claims]
    done = await store.acomplete_many(items)
    for i, record in enumerate(done):
        assert not isinstance(record, LeaseLostError)
        assert record == store.get("batch", f"a{i}")
    again = await store.aclaim_many([req(f"a{i}") for i in range(10)])
    assert {c.outcome for c in again} == {Outcome.REPLAY}
    stale = Ticket.of(claims[0].record)  # completed already: the ticket holds nothing now
    lost = await store.acomplete_many([Completion(stale, b"2", "json", 60.0)])
    assert isinstance(lost[0], LeaseLostError)
    await store.aclose()
