"""The steps capability's contract, on every store of the matrix, sync and async."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from mideng.core.record import ClaimRequest, Status, Ticket
from mideng.errors import LeaseLostError
from mideng.stores.steps import Finished, OperationPosition, StepStore
from tests.backends import Opened
from tests.runner import Runner


def _steps(opened: Opened) -> StepStore:
    assert isinstance(opened.store, StepStore)
    return opened.store


def _do(runner: Runner, store: StepStore, name: str, *args: Any) -> Any:
    return runner.do(lambda: getattr(store, f"a{name}")(*args), lambda: getattr(store, name)(*args))


def _claim(opened: Opened, scope: str, key: str, owner: str, lease: float = 30.0) -> Ticket:
    claim = opened.store.claim(ClaimRequest(scope, key, owner, lease, 60.0))
    assert claim.acquired
    return Ticket.of(claim.record)


def test_steps_are_kept_under_the_claim_and_read_back_at_once(
    opened: Opened, runner: Runner
) -> None:
    store, scope = _steps(opened), f"pay-{uuid.uuid4().hex[:6]}"
    _claim(opened, scope, "o1", "owner-1")
    assert (
        _do(runner, store, "begin_steps", scope, "o1", "owner-1", b'{"order":"o1"}', "json") == {}
    )
    _do(runner, store, "record_step", scope, "o1", "owner-1", "mark_paid#1", b'"paid"', "json")
    _do(runner, store, "record_step", scope, "o1", "owner-1", "issue_coupon#1", b"\x00\xff", "raw")
    # A second begin keeps the first arguments and answers every recorded step.
    found = _do(runner, store, "begin_steps", scope, "o1", "owner-1", b'{"other":1}', "json")
    assert found == {
        "mark_paid#1": Finished(b'"paid"', "json"),
        "issue_coupon#1": Finished(b"\x00\xff", "raw"),
    }
    (entry,) = _do(runner, store, "operations", scope, 10)
    assert (entry.scope, entry.key, entry.arguments, entry.codec) == (
        scope,
        "o1",
        b'{"order":"o1"}',
        "json",
    )
    assert entry.steps == ["mark_paid#1", "issue_coupon#1"]
    assert entry.record is not None
    assert entry.record.status is Status.PROCESSING
    assert [r.key for r in _do(runner, store, "running", scope, 10)] == ["o1"]
    _claim(opened, scope, "o0", "owner-0")
    _do(runner, store, "begin_steps", scope, "o0", "owner-0", b"{}", "json")
    # The oldest operations first, each whole, at most ``limit`` of them.
    (oldest,) = _do(runner, store, "operations", scope, 1)
    assert (oldest.key, oldest.steps) == ("o1", ["mark_paid#1", "issue_coupon#1"])
    assert len(_do(runner, store, "operations", None, 1000)) >= 2
    _do(runner, store, "clear_steps", scope, "o1")
    assert [e.key for e in _do(runner, store, "operations", scope, 10)] == ["o0"]


def test_a_step_of_a_lost_claim_is_refused_and_changes_nothing(
    opened: Opened, runner: Runner
) -> None:
    store, scope = _steps(opened), f"pay-{uuid.uuid4().hex[:6]}"
    with pytest.raises(LeaseLostError):  # no claim at all
        _do(runner, store, "begin_steps", scope, "o2", "nobody", b"{}", "json")
    ticket = _claim(opened, scope, "o2", "owner-1")
    _do(runner, store, "begin_steps", scope, "o2", "owner-1", b"{}", "json")
    for owner in ("owner-2", ""):
        with pytest.raises(LeaseLostError):
            _do(runner, store, "record_step", scope, "o2", owner, "sms#1", b"1", "json")
        with pytest.raises(LeaseLostError):
            _do(runner, store, "begin_steps", scope, "o2", owner, b"{}", "json")
    opened.store.complete(ticket, b"1", "json", 60.0)
    with pytest.raises(LeaseLostError):  # the record completed: its claim is over
        _do(runner, store, "record_step", scope, "o2", "owner-1", "sms#1", b"1", "json")
    (entry,) = _do(runner, store, "operations", scope, 10)
    assert entry.steps == []
    assert _do(runner, store, "running", scope, 10) == []


def test_a_take_over_reads_the_dead_holders_steps(opened: Opened, runner: Runner) -> None:
    store, scope = _steps(opened), f"pay-{uuid.uuid4().hex[:6]}"
    _claim(opened, scope, "o3", "dead", lease=0.2)
    _do(runner, store, "begin_steps", scope, "o3", "dead", b"[1]", "json")
    _do(runner, store, "record_step", scope, "o3", "dead", "mark_paid#1", b"1", "json")
    end = time.monotonic() + 10
    while True:
        claim = opened.store.claim(ClaimRequest(scope, "o3", "successor", 30.0, 60.0))
        if claim.acquired:
            break
        assert time.monotonic() < end
        time.sleep(0.05)
    found = _do(runner, store, "begin_steps", scope, "o3", "successor", b"[2]", "json")
    assert found == {"mark_paid#1": Finished(b"1", "json")}
    with pytest.raises(LeaseLostError):
        _do(runner, store, "record_step", scope, "o3", "dead", "issue_coupon#1", b"2", "json")
    (entry,) = _do(runner, store, "operations", scope, 10)
    assert entry.arguments == b"[1]"
    assert entry.steps == ["mark_paid#1"]


def test_operations_page_by_keyset_oldest_first(opened: Opened, runner: Runner) -> None:
    """Pages of two follow one another without a gap or a repeat, oldest first, of one scope
    or of every scope; a position past the last answers nothing."""
    store = _steps(opened)
    tag = uuid.uuid4().hex[:6]
    scopes = (f"a{tag}", f"b{tag}")
    for n in range(5):
        scope, key = scopes[n % 2], f"o{n}"
        _claim(opened, scope, key, f"owner-{n}")
        _do(runner, store, "begin_steps", scope, key, f"owner-{n}", b"{}", "json")
        time.sleep(0.01)  # each begins after the one before, by any store's clock
    seen: list[str] = []
    after = None
    while page := _do(runner, store, "operations", None, 2, after):
        assert len(page) <= 2
        seen.extend(e.key for e in page)
        after = OperationPosition.of(page[-1])
    assert seen == [f"o{n}" for n in range(5)]
    first = _do(runner, store, "operations", scopes[0], 2)
    assert [e.key for e in first] == ["o0", "o2"]
    rest = _do(runner, store, "operations", scopes[0], 2, OperationPosition.of(first[-1]))
    assert [e.key for e in rest] == ["o4"]
    assert _do(runner, store, "operations", scopes[0], 2, OperationPosition.of(rest[-1])) == []
