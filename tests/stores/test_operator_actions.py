"""An operator's conditional actions on records (mideng.guard.operator), on every store and
through both drivers: done while the record is as seen, an answer (never an error) when a
claim, a renewal or another operator came between seeing and acting."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
import uuid
from collections import Counter as Tally
from typing import Any

import pytest

from mideng import Guard
from mideng.core.answers import Changed, Done, Gone
from mideng.core.record import ClaimRequest, ExpiryPolicy, Outcome, Seen, Status, Ticket
from mideng.guard import operator
from tests.backends import Opened
from tests.helpers.operator_racer import resolve_all
from tests.helpers.together import together
from tests.runner import Runner

LEASE = 0.3


def _claimed(opened: Opened, scope: str, key: str, on_expiry: ExpiryPolicy) -> Ticket:
    """A holder that claims and never finishes: a crash, seen from the store."""
    claim = opened.store.claim(
        ClaimRequest(scope, key, uuid.uuid4().hex, LEASE, 60.0, None, on_expiry)
    )
    assert claim.outcome is Outcome.ACQUIRED
    return Ticket.of(claim.record)


def _stuck(opened: Opened, guard: Guard, scope: str, keys: list[str], unknown: bool) -> None:
    """``keys`` claimed and left: UNKNOWN (``unknown``) or processing, their leases run out."""
    policy = ExpiryPolicy.UNKNOWN if unknown else ExpiryPolicy.TAKE_OVER
    if unknown:
        guard.configure_scope(scope, on_expiry="unknown")
    for key in keys:
        _claimed(opened, scope, key, policy)
    time.sleep(LEASE + 0.15)
    if unknown:  # a claim is what turns a lapsed lease into UNKNOWN
        for key in keys:
            claim = opened.store.claim(
                ClaimRequest(scope, key, "someone", LEASE, 60.0, None, policy)
            )
            assert claim.record.status is Status.UNKNOWN


def _resolve(runner: Runner, guard: Guard, scope: str, key: str, seen: Seen, **how: Any) -> Any:
    return runner.do(
        lambda: operator.aresolve_record(guard, scope, key, seen, **how),
        lambda: operator.resolve_record(guard, scope, key, seen, **how),
    )


def _release(runner: Runner, guard: Guard, scope: str, key: str, seen: Seen) -> Any:
    return runner.do(
        lambda: operator.arelease_record(guard, scope, key, seen),
        lambda: operator.release_record(guard, scope, key, seen),
    )


def test_resolve_as_seen_is_done(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store)
    _stuck(opened, guard, "op-charge", ["a", "b"], unknown=True)
    seen = Seen(Status.UNKNOWN, 1)
    answer = _resolve(runner, guard, "op-charge", "a", seen, result={"charged": True})
    assert isinstance(answer, Done)
    assert answer.now.status is Status.SUCCEEDED
    replayed: Any = guard.run("op-charge", "a", lambda: "ran again")
    assert replayed == {"charged": True}
    failed = _resolve(runner, guard, "op-charge", "b", seen, failed=True)
    assert isinstance(failed, Done)
    assert failed.now.status is Status.FAILED
    assert guard.run("op-charge", "b", lambda: "ran again") == "ran again"


def test_resolve_after_another_operator_is_changed(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store)
    _stuck(opened, guard, "op-twice", ["a"], unknown=True)
    seen = Seen(Status.UNKNOWN, 1)
    assert isinstance(_resolve(runner, guard, "op-twice", "a", seen, failed=True), Done)
    again = _resolve(runner, guard, "op-twice", "a", seen, result="late")
    assert isinstance(again, Changed)
    assert again.now.status is Status.FAILED
    assert guard.get("op-twice", "a").result is None  # type: ignore[union-attr]


def test_resolve_at_a_stale_fence_changes_nothing(opened: Opened, runner: Runner) -> None:
    # The operator saw fence 1; a claim took the record over since (fence 2), and its lease
    # ran out too: it is resolvable again, but not the record the operator looked at.
    guard = Guard(opened.store)
    _stuck(opened, guard, "op-fence", ["a"], unknown=False)
    _claimed(opened, "op-fence", "a", ExpiryPolicy.TAKE_OVER)
    time.sleep(LEASE + 0.15)
    answer = _resolve(runner, guard, "op-fence", "a", Seen(Status.PROCESSING, 1), result=1)
    assert isinstance(answer, Changed)
    assert (answer.now.status, answer.now.fence) == (Status.PROCESSING, 2)
    assert guard.get("op-fence", "a").status is Status.PROCESSING  # type: ignore[union-attr]


def test_release_as_seen_deletes_the_record(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store)
    _stuck(opened, guard, "op-release", ["a"], unknown=False)
    answer = _release(runner, guard, "op-release", "a", Seen(Status.PROCESSING, 1))
    assert isinstance(answer, Done)
    assert answer.now.fence == 1
    assert guard.get("op-release", "a") is None
    gone = _release(runner, guard, "op-release", "a", Seen(Status.PROCESSING, 1))
    assert isinstance(gone, Gone)


def test_release_after_a_claim_took_over_is_changed(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store)
    _stuck(opened, guard, "op-taken", ["a"], unknown=False)
    ticket = _claimed(opened, "op-taken", "a", ExpiryPolicy.TAKE_OVER)  # between seeing and acting
    answer = _release(runner, guard, "op-taken", "a", Seen(Status.PROCESSING, 1))
    assert isinstance(answer, Changed)
    assert answer.now.fence == ticket.fence == 2
    opened.store.complete(ticket, b'"mine"', "json", 60.0)  # the new holder still holds it


def test_release_of_a_renewed_lease_is_changed(opened: Opened, runner: Runner) -> None:
    # Same fence, same status: but its holder renewed the lease, so it is not stuck any more.
    guard = Guard(opened.store)
    ticket = _claimed(opened, "op-renewed", "a", ExpiryPolicy.TAKE_OVER)
    time.sleep(LEASE + 0.15)
    opened.store.heartbeat(ticket, 30.0, 60.0)
    answer = _release(runner, guard, "op-renewed", "a", Seen(Status.PROCESSING, 1))
    assert isinstance(answer, Changed)
    assert opened.store.get("op-renewed", "a") is not None


def test_release_of_an_unknown_record(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store)
    _stuck(opened, guard, "op-unknown", ["a"], unknown=True)
    assert isinstance(_release(runner, guard, "op-unknown", "a", Seen(Status.UNKNOWN, 1)), Done)
    assert guard.run("op-unknown", "a", lambda: "again") == "again"


def test_release_of_a_kept_failure_lets_the_next_call_run(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store, on_error="record")

    def declined() -> None:
        raise ValueError("declined")

    with pytest.raises(Exception, match="declined"):
        guard.run("op-kept", "a", declined)
    with pytest.raises(Exception, match="declined"):
        guard.run("op-kept", "a", lambda: "replayed, not run")
    answer = _release(runner, guard, "op-kept", "a", Seen(Status.FAILED, 1))
    assert isinstance(answer, Done)
    assert guard.run("op-kept", "a", lambda: "ran") == "ran"


def test_threads_resolve_each_record_once(opened: Opened) -> None:
    guard = Guard(opened.store)
    keys = [f"k{i}" for i in range(20)]
    _stuck(opened, guard, "op-threads", keys, unknown=True)

    def operator_thread(n: int) -> list[str]:
        seen = Seen(Status.UNKNOWN, 1)
        answers = {k: operator.resolve_record(guard, "op-threads", k, seen, result=n) for k in keys}
        return [key for key, answer in answers.items() if isinstance(answer, Done)]

    assert sorted(together(8, operator_thread)) == sorted(keys)


@pytest.mark.slow
def test_processes_and_threads_resolve_each_record_once(
    shared: Opened, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert shared.url is not None
    guard = Guard(shared.store)
    keys = [f"k{i}" for i in range(60)]
    _stuck(shared, guard, "op-procs", keys, unknown=True)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    ctx = multiprocessing.get_context("spawn")
    seen = dict.fromkeys(keys, 1)
    with ctx.Pool(2) as pool:
        results = pool.starmap(resolve_all, [(shared.url, shared.options, "op-procs", seen, 8)] * 2)
    acted = Tally(line.split()[0] for lines in results for line in lines)
    assert set(acted) == set(keys)
    assert [key for key, n in acted.items() if n != 1] == []
    assert all(guard.get("op-procs", k).status is Status.SUCCEEDED for k in keys)  # type: ignore[union-attr]
