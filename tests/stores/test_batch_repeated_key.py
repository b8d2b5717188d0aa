"""A batch completion naming one key more than once answers, item by item, what the single
completions made one after another in the batch's order would: the first live ticket
completes, and every other item for that key (the same ticket again, or a stale one) answers
its LeaseLostError, on every store and both drivers; the stored result is the one answered."""

from __future__ import annotations

import uuid

from mideng.core.record import Status, Ticket
from mideng.errors import LeaseLostError
from mideng.stores.batch import Completion
from tests.backends import Opened
from tests.runner import Runner
from tests.stores.test_batch import batch_of, claim_many, complete_many, req


def test_the_same_ticket_twice_completes_once(opened: Opened, runner: Runner) -> None:
    store = batch_of(opened)
    s = uuid.uuid4().hex[:8]
    (claim,) = claim_many(runner, store, [req(f"twice-{s}", "w")])
    ticket = Ticket.of(claim.record)
    items = [
        Completion(ticket, b'"first"', "json", 60.0),
        Completion(ticket, b'"second"', "json", 60.0),
    ]
    first, second = complete_many(runner, store, items)
    assert first.status is Status.SUCCEEDED
    assert first.result == b'"first"'
    assert isinstance(second, LeaseLostError)
    assert store.get("batch", f"twice-{s}").result == b'"first"'


def test_a_stale_ticket_beside_the_live_one_loses_in_either_order(
    opened: Opened, runner: Runner
) -> None:
    store = batch_of(opened)
    s = uuid.uuid4().hex[:8]
    a, b = claim_many(runner, store, [req(f"sa-{s}", "w"), req(f"sb-{s}", "w")])
    live_a, live_b = Ticket.of(a.record), Ticket.of(b.record)
    stale_a = Ticket("batch", live_a.key, "zombie", live_a.fence)
    stale_b = Ticket("batch", live_b.key, "zombie", live_b.fence)
    items = [
        Completion(stale_a, b'"zombie"', "json", 60.0),
        Completion(live_a, b'"a"', "json", 60.0),
        Completion(live_b, b'"b"', "json", 60.0),
        Completion(stale_b, b'"zombie"', "json", 60.0),
    ]
    answers = complete_many(runner, store, items)
    assert isinstance(answers[0], LeaseLostError)
    assert answers[1].result == b'"a"'
    assert answers[2].result == b'"b"'
    assert isinstance(answers[3], LeaseLostError)
    assert store.get("batch", live_a.key).result == b'"a"'
    assert store.get("batch", live_b.key).result == b'"b"'


def test_repeats_with_different_terms_keep_the_batch_order(opened: Opened, runner: Runner) -> None:
    # Items of different codec or ttl may travel apart; the first asked must still be first.
    store = batch_of(opened)
    s = uuid.uuid4().hex[:8]
    other, claim = claim_many(runner, store, [req(f"to-{s}", "w"), req(f"tk-{s}", "w")])
    ticket = Ticket.of(claim.record)
    items = [
        Completion(Ticket.of(other.record), b'"o"', "json", 30.0),
        Completion(ticket, b'"first"', "json", 60.0),
        Completion(ticket, b'"second"', "json", 30.0),
    ]
    answers = complete_many(runner, store, items)
    assert answers[0].result == b'"o"'
    assert answers[1].status is Status.SUCCEEDED
    assert answers[1].result == b'"first"'
    assert isinstance(answers[2], LeaseLostError)
    assert store.get("batch", ticket.key).result == b'"first"'
