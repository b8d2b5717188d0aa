"""The contract every store keeps, run on each backend and through both drivers.

Time-based cases use short leases and ttls; they wait for a deadline to pass, never for a
race to settle.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import threading
import time
import uuid
from collections.abc import Callable
from decimal import Decimal

import pydantic
import pytest

from mideng import Guard, Status
from mideng.core.record import ClaimRequest, ExpiryPolicy, Outcome, Ticket
from mideng.errors import (
    InProgressError,
    LeaseLostError,
    PayloadMismatchError,
    RecordedFailureError,
    UnresolvedError,
)
from tests.backends import Opened
from tests.runner import Runner


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    qty: int


@dataclasses.dataclass(frozen=True)
class Receipt:
    order: str
    amount: Decimal
    at: dt.datetime
    ref: uuid.UUID
    colour: Colour
    lines: list[Line]
    note: str | None = None


class Coupon(pydantic.BaseModel):
    code: str
    value: Decimal
    expires: dt.date


class Declined(Exception):
    """A business error whose replay must come back as itself."""


class Unbuildable(Exception):
    def __init__(self, code: int, detail: object) -> None:
        super().__init__(f"code {code}")
        self.detail = detail


class Counter:
    def __init__(self) -> None:
        self.n = 0
        self._lock = threading.Lock()

    def bump(self) -> int:
        with self._lock:
            self.n += 1
            return self.n


def unannotated(fn: Callable[[], object]) -> Callable[[], object]:
    """The same body without a return annotation, so a replay hands back plain JSON."""

    def body():  # type: ignore[no-untyped-def]
        return fn()

    return body


def claim_directly(
    opened: Opened,
    scope: str,
    key: str,
    lease: float,
    on_expiry: ExpiryPolicy = ExpiryPolicy.TAKE_OVER,
) -> Ticket:
    """A holder that claims and then never finishes: a crash, seen from the store."""
    claim = opened.store.claim(
        ClaimRequest(scope, key, uuid.uuid4().hex, lease, 60.0, None, on_expiry)
    )
    assert claim.outcome is Outcome.ACQUIRED
    return Ticket.of(claim.record)


def test_first_run_then_replay_of_typed_results(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store)
    runs = Counter()
    receipt = Receipt(
        "o-1",
        Decimal("10.50"),
        dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
        uuid.uuid4(),
        Colour.BLUE,
        [Line("a", 2), Line("b", 1)],
    )

    def body() -> Receipt:
        runs.bump()
        return receipt

    first = runner.call(guard, "pay", "o-1", body)
    second = runner.call(guard, "pay", "o-1", body)
    assert first == receipt
    assert second == receipt
    assert type(second) is Receipt
    assert isinstance(second.lines[0], Line)
    assert runs.n == 1

    def coupon() -> Coupon:
        runs.bump()
        return Coupon(code="C1", value=Decimal("5"), expires=dt.date(2027, 1, 1))

    first_coupon = runner.call(guard, "coupon", "o-1", coupon)
    replayed = runner.call(guard, "coupon", "o-1", coupon)
    assert isinstance(replayed, Coupon)
    assert replayed == first_coupon
    assert replayed.value == Decimal("5")
    assert runs.n == 2
    record = guard.get("coupon", "o-1")
    assert record is not None
    assert record.status is Status.SUCCEEDED


def test_scopes_keep_keys_apart(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store)
    runs = Counter()
    runner.call(guard, "refund", "123", runs.bump)
    runner.call(guard, "pay", "123", runs.bump)
    assert runs.n == 2


def test_the_longest_keys_are_kept_whole(opened: Opened, runner: Runner) -> None:
    # The longest scope and key the core admits, in 4-byte characters, differing only at the
    # end: a store that cut them short would run one body for both.
    guard = Guard(opened.store)
    runs = Counter()
    scope = "\U0001f4b3" * 128
    keys = ["\U0001f9fe" * 254 + end for end in ("\U0001f4e6", "\U0001f4e7")]
    for key in keys:
        assert runner.call(guard, scope, key, runs.bump) == runs.n
    assert [runner.call(guard, scope, key, runs.bump) for key in keys] == [1, 2]
    assert runs.n == 2
    stored = guard.get(scope, keys[1])
    assert stored is not None
    assert (stored.scope, stored.key) == (scope, keys[1])


def test_payload_mismatch_raises_and_equal_payload_replays(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store)
    runs = Counter()
    runner.call(guard, "order", "k", runs.bump, payload={"sku": "a", "qty": 1})
    # Same logical payload, other key order: a replay, not a mismatch.
    assert runner.call(guard, "order", "k", runs.bump, payload={"qty": 1, "sku": "a"}) == 1
    with pytest.raises(PayloadMismatchError) as info:
        runner.call(guard, "order", "k", runs.bump, payload={"sku": "a", "qty": 2})
    assert info.value.record is not None
    assert runs.n == 1


def _hold(
    runner: Runner, guard: Guard, scope: str, key: str, value: str
) -> tuple[threading.Event, threading.Event, list[object], threading.Thread]:
    started, finish = threading.Event(), threading.Event()
    out: list[object] = []

    def body() -> str:
        started.set()
        assert finish.wait(30)
        return value

    def holder() -> None:
        out.append(runner.call(guard, scope, key, body))

    thread = threading.Thread(target=holder)
    thread.start()
    assert started.wait(30)
    return started, finish, out, thread


def test_in_progress_raises_while_holder_runs(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store, lease=30)
    runs = Counter()
    _, finish, out, thread = _hold(runner, guard, "ship", "s1", "shipped")
    with pytest.raises(InProgressError) as info:
        runner.call(guard, "ship", "s1", runs.bump)
    assert info.value.retry_after > 0
    finish.set()
    thread.join(30)
    assert out == ["shipped"]
    assert runner.call(guard, "ship", "s1", unannotated(runs.bump)) == "shipped"
    assert runs.n == 0


def test_in_progress_wait_replays_the_holders_result(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store, lease=30, in_progress="wait", wait_timeout=30)
    runs = Counter()
    _, finish, out, thread = _hold(runner, guard, "ship", "s2", "shipped")
    waiter_out: list[object] = []
    waiter = threading.Thread(
        target=lambda: waiter_out.append(runner.call(guard, "ship", "s2", unannotated(runs.bump)))
    )
    waiter.start()
    finish.set()
    thread.join(30)
    waiter.join(30)
    assert out == ["shipped"]
    assert waiter_out == ["shipped"]
    assert runs.n == 0


def test_wait_gives_up_after_its_timeout(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store, lease=30, in_progress="wait", wait_timeout=0.3)
    _, finish, _, thread = _hold(runner, guard, "ship", "s3", "x")
    try:
        with pytest.raises(InProgressError, match="after waiting"):
            runner.call(guard, "ship", "s3", lambda: "never")
    finally:
        finish.set()
        thread.join(30)


def test_exception_releases_and_reraises_untouched(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store)
    runs = Counter()
    error = ValueError("gateway timeout")

    def flaky() -> str:
        if runs.bump() == 1:
            raise error
        return "paid"

    with pytest.raises(ValueError, match="gateway timeout") as info:
        runner.call(guard, "pay", "p1", flaky)
    assert info.value is error
    assert guard.get("pay", "p1") is None
    assert runner.call(guard, "pay", "p1", flaky) == "paid"
    assert runner.call(guard, "pay", "p1", flaky) == "paid"
    assert runs.n == 2


def test_record_mode_replays_the_failure(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store, on_error="record")
    runs = Counter()

    def declined() -> str:
        runs.bump()
        raise Declined("card declined")

    with pytest.raises(Declined):
        runner.call(guard, "pay", "p2", declined)
    with pytest.raises(Declined, match="card declined"):
        runner.call(guard, "pay", "p2", declined)

    def odd() -> str:
        runs.bump()
        raise Unbuildable(7, object())

    with pytest.raises(Unbuildable):
        runner.call(guard, "pay", "p3", odd)
    with pytest.raises(RecordedFailureError, match="code 7") as info:
        runner.call(guard, "pay", "p3", odd)
    assert info.value.type_name.endswith("Unbuildable")
    assert runs.n == 2
    record = guard.get("pay", "p2")
    assert record is not None
    assert record.status is Status.FAILED


class Untold(Exception):
    """A business error whose text is made from a field it never got."""

    def __str__(self) -> str:
        return f"refused: {self.reason}"  # type: ignore[attr-defined]


class Held(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    lock: object


def test_record_mode_records_a_failure_it_cannot_spell(opened: Opened, runner: Runner) -> None:
    # The failure is stored as data after the body ran: a part of it that can't be spelt
    # (a model_dump that raises, arguments that contain themselves, a str() that raises) once
    # escaped with the claim held, and the retry that took the lapsed lease ran the body again.
    guard = Guard(opened.store, on_error="record")
    looped: list[object] = []
    looped.append(looped)
    errors = {
        "p4": ValueError(Held(lock=threading.Lock())),
        "p5": ValueError(looped),
        "p6": Untold(),
    }
    runs = Counter()
    for key, error in errors.items():

        def body(error: BaseException = error) -> str:
            runs.bump()
            raise error

        with pytest.raises(type(error)) as info:
            runner.call(guard, "pay", key, body)
        assert info.value is error
        record = guard.get("pay", key)
        assert record is not None
        assert record.status is Status.FAILED
        with pytest.raises(RecordedFailureError) as replayed:
            runner.call(guard, "pay", key, body)
        assert replayed.value.type_name.endswith(type(error).__qualname__)
    assert runs.n == len(errors)


def test_take_over_after_lease_expiry_and_fenced_late_write(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store, lease=30)
    # Connect (a cluster client learns its slot map, the server its functions) before the
    # short lease starts, so the first look below cannot outlast it.
    runner.call(guard, "job", "warm-up", Counter().bump)
    zombie = claim_directly(opened, "job", "j1", lease=0.4)
    runs = Counter()
    with pytest.raises(InProgressError):
        runner.call(guard, "job", "j1", runs.bump)
    end = time.monotonic() + 10
    result = None
    while result is None:
        try:
            result = runner.call(guard, "job", "j1", runs.bump)
        except InProgressError:
            assert time.monotonic() < end, "lease never expired"
            time.sleep(0.05)
    assert result == 1
    record = guard.get("job", "j1")
    assert record is not None
    assert record.fence == zombie.fence + 1
    assert record.status is Status.SUCCEEDED
    with pytest.raises(LeaseLostError):
        opened.store.complete(zombie, b'"zombie"', "json", 60)
    with pytest.raises(LeaseLostError):
        opened.store.release(zombie)
    with pytest.raises(LeaseLostError):
        opened.store.heartbeat(zombie, 30, 60)
    after = guard.get("job", "j1")
    assert after == record
    assert runner.call(guard, "job", "j1", runs.bump) == 1


def test_heartbeat_keeps_a_long_body_owned(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store, lease=0.6)
    runs = Counter()
    _, finish, out, thread = _hold(runner, guard, "long", "l1", "done")
    try:
        # Three leases later the holder is still the owner, because it keeps renewing.
        time.sleep(1.8)
        with pytest.raises(InProgressError):
            runner.call(guard, "long", "l1", runs.bump)
    finally:
        finish.set()
        thread.join(30)
    assert out == ["done"]
    assert runs.n == 0


def test_ttl_expiry_lets_the_key_run_again(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store, ttl=0.3)
    runs = Counter()
    assert runner.call(guard, "t", "k", runs.bump) == 1
    assert runner.call(guard, "t", "k", runs.bump) == 1
    time.sleep(0.45)
    assert guard.get("t", "k") is None
    assert runner.call(guard, "t", "k", runs.bump) == 2


def test_purge_deletes_only_expired_records(opened: Opened, runner: Runner) -> None:
    short = Guard(opened.store, ttl=0.2)
    keep = Guard(opened.store, ttl=600)
    for i in range(3):
        runner.call(short, "purge", f"old-{i}", lambda: "x")
    runner.call(keep, "purge", "new", lambda: "y")
    time.sleep(0.35)
    purged = short.purge()
    assert purged == (0 if opened.store.self_expiring else 3)
    assert all(short.get("purge", f"old-{i}") is None for i in range(3))
    assert keep.get("purge", "new") is not None
    assert short.purge() == 0


def test_unknown_policy_refuses_until_resolved(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store)
    guard.configure_scope("charge", on_expiry="unknown")
    claim_directly(opened, "charge", "c1", lease=0.3, on_expiry=ExpiryPolicy.UNKNOWN)
    claim_directly(opened, "charge", "c2", lease=0.3, on_expiry=ExpiryPolicy.UNKNOWN)
    time.sleep(0.45)
    runs = Counter()
    with pytest.raises(UnresolvedError):
        runner.call(guard, "charge", "c1", runs.bump)
    with pytest.raises(UnresolvedError):
        runner.call(guard, "charge", "c1", runs.bump)
    stuck = {(r.scope, r.key) for r in guard.unresolved("charge")}
    assert stuck == {("charge", "c1"), ("charge", "c2")}
    record = guard.get("charge", "c1")
    assert record is not None
    assert record.status is Status.UNKNOWN
    guard.resolve("charge", "c1", result={"charged": True})
    assert runner.call(guard, "charge", "c1", unannotated(runs.bump)) == {"charged": True}
    guard.resolve("charge", "c2", failed=True)
    assert runner.call(guard, "charge", "c2", runs.bump) == 1
    assert runner.call(guard, "charge", "c2", runs.bump) == 1
    assert guard.unresolved("charge") == []
    assert runs.n == 1


def test_get_and_forget(opened: Opened, runner: Runner) -> None:
    guard = Guard(opened.store)
    runs = Counter()
    runner.call(guard, "f", "k", runs.bump)
    record = guard.get("f", "k")
    assert record is not None
    assert record.fence == 1
    assert guard.forget("f", "k") is True
    assert guard.get("f", "k") is None
    assert guard.forget("f", "k") is False
    assert runner.call(guard, "f", "k", runs.bump) == 2


def test_tokens_are_taken_once(opened: Opened) -> None:
    store = opened.store
    store.put_token("submit", "user-1:order", "tok-a", 60)
    assert store.take_token("submit", "user-1:order", "tok-b") is False
    assert store.take_token("submit", "user-1:order", "tok-a") is True
    assert store.take_token("submit", "user-1:order", "tok-a") is False
    store.put_token("submit", "user-1:order", "tok-c", 0.2)
    time.sleep(0.3)
    assert store.take_token("submit", "user-1:order", "tok-c") is False


def test_hit_window_counts_within_the_window(opened: Opened) -> None:
    store = opened.store
    assert store.hit("create", "user-1", 0.4, 1) is None
    retry = store.hit("create", "user-1", 0.4, 1)
    assert retry is not None
    assert 0 < retry <= 0.4
    assert store.hit("create", "user-2", 0.4, 1) is None
    time.sleep(0.5)
    assert store.hit("create", "user-1", 0.4, 1) is None


def test_the_store_clock_is_the_one_its_leases_are_stamped_with(
    opened: Opened, runner: Runner
) -> None:
    """``now`` reads the clock leases are measured on: a lease of L seconds taken between two
    readings ends between the first reading + L and the second + L."""
    store, scope = opened.store, f"clock-{uuid.uuid4().hex[:8]}"
    before = runner.do(store.anow, store.now)
    ticket = claim_directly(opened, scope, "k", lease=30.0)
    after = runner.do(store.anow, store.now)
    record = store.get(scope, ticket.key)
    assert record is not None
    assert record.lease_until is not None
    assert before <= after
    assert before + 30.0 - 0.01 <= record.lease_until <= after + 30.0 + 0.01
    assert abs(after - time.time()) < 5.0  # the test machine's services share its clock
