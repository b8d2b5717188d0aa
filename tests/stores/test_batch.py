"""The batch capability (mideng.stores.batch) on every store of the matrix, both drivers:
a batch claim answers, key by key, what single claims would; batch completions settle live
claims and answer a lost one's LeaseLostError in its place; racing batches take each key once."""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any

import pytest

from mideng.core.record import ClaimRequest, Outcome, Status, Ticket
from mideng.errors import ConfigurationError, LeaseLostError
from mideng.stores.batch import BatchStore, Completion
from tests.backends import Opened
from tests.runner import Runner


def batch_of(opened: Opened) -> Any:
    store = opened.store
    assert isinstance(store, BatchStore), f"{type(store).__name__} has no batch capability"
    return store


def claim_many(runner: Runner, store: Any, reqs: list[ClaimRequest]) -> list[Any]:
    return runner.do(lambda: store.aclaim_many(reqs), lambda: store.claim_many(reqs))


def complete_many(runner: Runner, store: Any, items: list[Completion]) -> list[Any]:
    return runner.do(lambda: store.acomplete_many(items), lambda: store.complete_many(items))


def req(key: str, owner: str, lease: float = 30.0, fingerprint: str | None = None) -> ClaimRequest:
    return ClaimRequest("batch", key, owner, lease, 60.0, fingerprint)


def test_a_batch_claim_answers_each_key_as_a_single_claim_would(
    opened: Opened, runner: Runner
) -> None:
    store = batch_of(opened)
    s = uuid.uuid4().hex[:8]
    done, held, lapsed, failed, printed = (
        f"{n}-{s}" for n in ("done", "held", "lapsed", "failed", "fp")
    )
    first = store.claim(req(done, "a"))
    store.complete(Ticket.of(first.record), b'"ok"', "json", 60.0)
    store.claim(req(held, "a"))
    store.claim(req(lapsed, "a", lease=0.2))
    failing = store.claim(req(failed, "a"))
    store.fail(Ticket.of(failing.record), b'{"type": "x:Y", "message": "m", "args": []}', 60.0)
    store.claim(req(printed, "a", fingerprint="one"))
    time.sleep(0.3)

    asked = [
        req(f"new-{s}", "b"),
        req(done, "b"),
        req(held, "b"),
        req(lapsed, "b"),
        req(failed, "b"),
        req(printed, "b", fingerprint="two"),
        req(f"new2-{s}", "b"),
    ]
    claims = claim_many(runner, store, asked)
    outcomes = [c.outcome for c in claims]
    assert outcomes == [
        Outcome.ACQUIRED,
        Outcome.REPLAY,
        Outcome.IN_PROGRESS,
        Outcome.ACQUIRED,
        Outcome.REPLAY,
        Outcome.MISMATCH,
        Outcome.ACQUIRED,
    ]
    assert [c.record.key for c in claims] == [r.key for r in asked]
    new, taken_over = claims[0].record, claims[3].record
    assert (new.owner, new.fence, new.attempts, new.status) == ("b", 1, 1, Status.PROCESSING)
    assert (taken_over.owner, taken_over.fence, taken_over.attempts) == ("b", 2, 2)
    assert claims[1].record.result == b'"ok"'
    # What the batch took, the single operations see and settle.
    assert store.get("batch", f"new-{s}").owner == "b"
    store.heartbeat(Ticket.of(new), 30.0, 60.0)
    assert store.complete(Ticket.of(new), b"1", "json", 60.0).status is Status.SUCCEEDED


def test_batch_completions_settle_live_claims_and_answer_a_lost_one_in_place(
    opened: Opened, runner: Runner
) -> None:
    store = batch_of(opened)
    s = uuid.uuid4().hex[:8]
    claims = claim_many(runner, store, [req(f"c{i}-{s}", "w") for i in range(4)])
    tickets = [Ticket.of(c.record) for c in claims]
    stale = Ticket("batch", f"c2-{s}", "someone-else", tickets[2].fence)
    items = [Completion(t, f"{i}".encode(), "json", 60.0) for i, t in enumerate(tickets)]
    items[2] = Completion(stale, b"2", "json", 60.0)
    answers = complete_many(runner, store, items)
    assert isinstance(answers[2], LeaseLostError)
    for i in (0, 1, 3):
        assert answers[i].status is Status.SUCCEEDED
        assert store.get("batch", f"c{i}-{s}").result == f"{i}".encode()
    assert store.get("batch", f"c2-{s}").status is Status.PROCESSING  # changed nothing
    assert complete_many(runner, store, []) == []


def test_a_batch_naming_one_key_twice_is_refused(opened: Opened, runner: Runner) -> None:
    store = batch_of(opened)
    with pytest.raises(ConfigurationError, match="twice"):
        claim_many(runner, store, [req("same", "a"), req("same", "b")])


@pytest.mark.slow
def test_racing_batches_take_each_key_exactly_once(shared: Opened) -> None:
    store = batch_of(shared)
    s = uuid.uuid4().hex[:8]
    keys = [f"race{i}-{s}" for i in range(60)]
    won: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def worker(n: int) -> None:
        rng = random.Random(n)
        mine = keys[:]
        rng.shuffle(mine)
        start.wait()
        for chunk in (mine[:20], mine[20:40], mine[40:]):
            claims = store.claim_many([req(k, f"w{n}") for k in chunk])
            with lock:
                won.extend(c.record.key for c in claims if c.outcome is Outcome.ACQUIRED)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(won) == sorted(keys)
