"""What the per-call paths make (records from a claim, a completion or a row; claims; calls) is
what the class's own constructor makes from the same values: every field set, none left out."""

from __future__ import annotations

import dataclasses
from typing import Any

from mideng import Guard
from mideng.core.decide import completed, decide, finished, fresh
from mideng.core.flow import RUN, Call
from mideng.core.record import (
    Claim,
    ClaimRequest,
    ExpiryPolicy,
    Outcome,
    Record,
    Status,
    Ticket,
)
from mideng.stores.memory import MemoryStore
from mideng.stores.record_table.rows import psycopg_current


def _rebuilt(obj: Any) -> Any:
    """``obj`` made again by its class, from its own init fields (AttributeError: one unset)."""
    values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
    return type(obj)(**values)


REQ = ClaimRequest("s", "k", "o1", 30.0, 600.0, "fp", ExpiryPolicy.TAKE_OVER, "rid", 0)


def test_a_fresh_claims_record_is_the_one_its_constructor_makes() -> None:
    made = fresh(REQ, 100.0, None)
    assert type(made) is Record
    assert made == _rebuilt(made)
    expected = Record("s", "k", Status.PROCESSING, 1, "o1", "fp", 130.0, None, None, None, 1, "rid")
    expected.created_at, expected.updated_at, expected.expires_at = 100.0, 100.0, 730.0
    assert made == expected
    again = fresh(REQ, 200.0, made)  # a take-over counts on from the record it replaces
    assert (again.fence, again.attempts, again.created_at) == (2, 2, 100.0)
    unknown = fresh(dataclasses.replace(REQ, on_expiry=ExpiryPolicy.UNKNOWN), 1.0, None)
    assert unknown.expires_at is None


def test_a_completed_record_is_what_finished_makes() -> None:
    claimed = fresh(REQ, 100.0, None)
    for ttl in (60.0, None):
        done = completed(claimed, 150.0, result=b"1", codec="json", ttl=ttl)
        assert type(done) is Record
        assert done == _rebuilt(done)
        assert done == finished(
            claimed, 150.0, status=Status.SUCCEEDED, result=b"1", codec="json", ttl=ttl
        )


def test_a_typed_row_is_read_into_every_field() -> None:
    row = ("succeeded", 2, "o", "fp", None, b"{}", "json", None, 3, "rid", 1.0, 2.0, 3.0, 9.0)
    record, now = psycopg_current(row, "s", "k")
    assert record == _rebuilt(record)
    assert record == Record("s", "k", Status.SUCCEEDED, *row[1:13])
    assert record.status is Status.SUCCEEDED
    assert now == 9.0


def test_a_standing_claim_is_the_one_its_constructor_makes() -> None:
    record = fresh(REQ, 100.0, None)
    claim, write = decide(record, REQ, 101.0)
    assert not write
    assert claim == Claim(Outcome.IN_PROGRESS, record) == _rebuilt(claim)


def test_a_prepared_call_sets_every_field_and_its_ticket_too() -> None:
    guard = Guard(MemoryStore(), lease=7.0)

    def body() -> dict[str, int]:
        return {"a": 1}

    call = guard.prepare("s", "k", body, {"p": 1})
    assert type(call) is Call
    assert call == _rebuilt(call)
    assert (call.scope, call.key, call.lease, call.polls, call.duplicate) == (
        "s",
        "k",
        7.0,
        0,
        None,
    )
    assert call.type_hint == dict[str, int]
    assert call.fingerprint is not None
    claim = guard.store.claim(call)
    assert call.next(claim) is RUN
    assert call.ticket == Ticket.of(claim.record) == _rebuilt(call.ticket)
