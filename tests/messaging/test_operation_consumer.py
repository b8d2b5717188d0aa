"""OperationConsumer's rules, without a broker: the operation runs under the message's key,
what counts as an attempt (a claim that runs the body, once, in the operation's record), the
dead letter at the operation scope's max_attempts, a copy while the operation runs elsewhere
(no attempt), and what it refuses at construction. Through real brokers, with a SIGKILL
between two steps: tests/messaging/base/operations.py."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable

import pytest

from mideng import Guard
from mideng.core.record import ClaimRequest, Outcome, Status
from mideng.errors import ConfigurationError
from mideng.messaging import (
    Ack,
    DeadLetter,
    IdempotentConsumer,
    Message,
    OperationConsumer,
    Retry,
    Verdict,
)
from mideng.stores.memory import MemoryStore


def msg(key: str, body: object) -> Message:
    return Message(json.dumps(body).encode(), {"idempotency-key": key}, id=f"m-{key}")


def guard_for(max_attempts: int = 3) -> Guard:
    guard = Guard(MemoryStore(), lease=30)
    guard.configure_scope("notify", on_error="retry", max_attempts=max_attempts)
    return guard


def parked_operation(
    guard: Guard,
) -> tuple[Callable[[str], str], threading.Event, threading.Event]:
    """An operation whose one step sets ``inside`` and waits for ``release``: held by its
    first caller for as long as the test likes."""
    inside, release = threading.Event(), threading.Event()

    @guard.step("sms")
    def sms(order: str) -> None:
        inside.set()
        assert release.wait(10)

    @guard.operation("notify", key="{order}")
    def notify(order: str) -> str:
        sms(order)
        return "sent"

    return notify, inside, release


def test_the_operation_runs_under_the_messages_key_and_a_copy_is_acked_unrun() -> None:
    guard = guard_for()
    sent: list[str] = []

    @guard.step("sms")
    def sms(order: str) -> None:
        sent.append(order)

    @guard.operation("notify", key="{order}")
    def notify(order: str) -> str:
        sms(order)
        return "sent"

    consumer = OperationConsumer(guard, notify)
    # The key is the message's, not the one the arguments would render.
    first = asyncio.run(consumer.handle(msg("evt-7", {"order": "o-1"})))
    copy = asyncio.run(consumer.handle(msg("evt-7", {"order": "o-1"})))
    assert (first, copy) == (Ack(ran=True), Ack(ran=False))
    assert sent == ["o-1"]
    record = guard.get("notify", "evt-7")
    assert record is not None
    assert record.status is Status.SUCCEEDED
    assert guard.get("notify", "o-1") is None


def test_each_failed_run_is_one_attempt_and_the_last_is_dead_lettered() -> None:
    guard = guard_for(max_attempts=2)
    runs: list[str] = []

    @guard.step("sms")
    def sms(order: str) -> None:
        runs.append("sms")

    @guard.step("coupon")
    def coupon(order: str) -> None:
        runs.append("coupon")
        raise ConnectionError("coupon service down")

    @guard.operation("notify", key="{order}")
    def notify(order: str) -> str:
        sms(order)
        coupon(order)
        return "sent"

    consumer = OperationConsumer(guard, notify, retry_delay=0.5)
    verdicts = [asyncio.run(consumer.handle(msg("o-1", {"order": "o-1"}))) for _ in range(3)]
    assert isinstance(verdicts[0], Retry)
    assert verdicts[0].delay == 0.5
    assert isinstance(verdicts[1], DeadLetter)
    assert "failed 2 time(s)" in verdicts[1].reason
    assert isinstance(verdicts[2], DeadLetter)  # given up on: nothing runs
    # The sms step ran once: each retry resumed at the coupon.
    assert runs == ["sms", "coupon", "coupon"]
    record = guard.get("notify", "o-1")
    assert record is not None
    assert record.attempts == 2


def test_a_copy_while_the_operation_runs_elsewhere_is_no_attempt() -> None:
    guard = guard_for(max_attempts=2)
    notify, inside, release = parked_operation(guard)

    consumer = OperationConsumer(guard, notify, in_flight_delay=0.3)

    async def both() -> tuple[Verdict, list[Verdict]]:
        first = asyncio.ensure_future(consumer.handle(msg("o-1", {"order": "o-1"})))
        await asyncio.to_thread(inside.wait, 10)
        # More copies than max_attempts, while the first holds the operation.
        copies = [await consumer.handle(msg("o-1", {"order": "o-1"})) for _ in range(3)]
        release.set()
        return await first, copies

    first, copies = asyncio.run(both())
    assert first == Ack(ran=True)
    assert all(isinstance(c, Retry) and c.delay <= 0.3 for c in copies), copies
    record = guard.get("notify", "o-1")
    assert record is not None
    assert record.attempts == 1


def test_a_body_that_is_no_json_object_is_dead_lettered_unrun() -> None:
    guard = guard_for()

    @guard.operation("notify", key="{order}")
    def notify(order: str) -> str:
        raise AssertionError("never run")

    consumer = OperationConsumer(guard, notify)
    verdict = asyncio.run(consumer.handle(msg("o-1", ["o-1"])))
    assert isinstance(verdict, DeadLetter)
    assert "not an object" in verdict.reason
    assert guard.get("notify", "o-1") is None


def test_it_refuses_what_is_no_operation_or_keeps_no_failures() -> None:
    guard = Guard(MemoryStore())

    @guard.operation("notify", key="{order}")
    def notify(order: str) -> str:
        return "sent"

    with pytest.raises(ConfigurationError, match="on_error='retry'"):
        OperationConsumer(guard, notify)
    with pytest.raises(ConfigurationError, match="not an operation of this guard"):
        OperationConsumer(guard, lambda order: None)
    with pytest.raises(ConfigurationError, match="not an operation of this guard"):
        OperationConsumer(Guard(MemoryStore()), notify)


def test_the_hand_made_glue_counted_a_copy_in_flight_as_a_failed_attempt() -> None:
    """What users wrote before: an IdempotentConsumer whose handler calls the operation. Two
    records per message, and each copy delivered while the operation is held (a holder that
    died keeps it until its lease ends) is a handler failure: attempts run out."""
    guard = guard_for()
    notify, inside, release = parked_operation(guard)

    glue = IdempotentConsumer(
        guard,
        "paid",
        lambda m: notify(json.loads(m.body)["order"]),
        max_attempts=2,
        retry_delay=0.1,
    )

    async def held() -> object:
        threading.Thread(target=notify, args=("o-1",), daemon=True).start()
        await asyncio.to_thread(inside.wait, 10)
        verdicts: list[Verdict] = []
        for _ in range(2):
            verdicts.append(await glue.handle(msg("o-1", {"order": "o-1"})))
            await asyncio.sleep(0.15)  # the failed attempt's backoff, as the broker waits it
        release.set()
        return verdicts[-1]

    assert isinstance(asyncio.run(held()), DeadLetter)  # never ran, yet given up on
    assert guard.get("paid", "o-1") is not None  # the consumer's record beside the operation's


def test_an_async_operation_is_awaited_on_the_loop() -> None:
    guard = guard_for()
    sent: list[str] = []

    @guard.step("sms")
    async def sms(order: str) -> None:
        sent.append(order)

    @guard.operation("notify", key="{order}")
    async def notify(order: str) -> str:
        await sms(order)
        return "sent"

    consumer = OperationConsumer(guard, notify)
    verdicts = [asyncio.run(consumer.handle(msg("o-1", {"order": "o-1"}))) for _ in range(2)]
    assert verdicts == [Ack(ran=True), Ack(ran=False)]
    assert sent == ["o-1"]


def test_a_take_over_of_a_dead_holder_is_one_attempt_and_its_copies_none() -> None:
    guard = guard_for(max_attempts=2)
    runs: list[str] = []

    @guard.step("coupon")
    def coupon(order: str) -> None:
        runs.append(order)
        raise ConnectionError("coupon service down")

    @guard.operation("notify", key="{order}")
    def notify(order: str) -> str:
        coupon(order)
        return "sent"

    consumer = OperationConsumer(guard, notify, in_flight_delay=0.1)
    # A consumer that claimed the message's operation and was killed: its lease runs out.
    dead = guard.store.claim(
        ClaimRequest("notify", "o-1", uuid.uuid4().hex, 0.5, 60.0, max_attempts=2)
    )
    assert dead.outcome is Outcome.ACQUIRED
    copies = 0
    deadline = time.monotonic() + 10
    while True:
        verdict = asyncio.run(consumer.handle(msg("o-1", {"order": "o-1"})))
        if not (isinstance(verdict, Retry) and "in flight" in verdict.reason):
            break
        copies += 1  # the broker's redeliveries while the dead holder's lease lasts
        assert time.monotonic() < deadline, "the lease never ran out"
        time.sleep(0.1)
    assert copies >= 1
    # The take-over was attempt 2: its failure used the last attempt, however many copies came.
    assert isinstance(verdict, DeadLetter)
    assert "failed 2 time(s)" in verdict.reason
    assert runs == ["o-1"]
