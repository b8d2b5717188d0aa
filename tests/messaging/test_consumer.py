"""IdempotentConsumer's decisions on the memory store: one run per key, duplicates acked
without running, keys and request ids off the message, failures counted into a dead letter,
in-flight copies sent back with a delay, leases renewed, store faults never lose a message."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import pydantic
import pytest

from mideng import Guard
from mideng.context import get_request_id, request_id_scope
from mideng.core.record import ClaimRequest, Status
from mideng.errors import StoreUnavailableError
from mideng.messaging import Ack, DeadLetter, IdempotentConsumer, Message, Retry, Verdict
from mideng.messaging.publish import outgoing
from mideng.stores.memory import MemoryStore

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


def msg(key: str | None, body: bytes = b"{}", **headers: str) -> Message:
    if key is not None:
        headers["idempotency-key"] = key
    return Message(body, headers, id=f"m-{key}")


class Runs:
    def __init__(self) -> None:
        self.keys: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, message: Message) -> None:
        with self.lock:
            self.keys.append(message.headers.get("idempotency-key", "?"))


def consumer(handler: Callable[..., Any], **options: Any) -> tuple[IdempotentConsumer, Guard]:
    guard = Guard(MemoryStore(), lease=5)
    options.setdefault("retry_delay", 0.05)
    return IdempotentConsumer(guard, "stock", handler, **options), guard


def test_a_finished_duplicate_is_acked_without_running() -> None:
    runs = Runs()
    c, _ = consumer(runs)
    assert run(c.handle(msg("order:1"))) == Ack(ran=True)
    assert run(c.handle(msg("order:1"))) == Ack(ran=False)
    assert run(c.handle(msg("order:2"))) == Ack(ran=True)
    assert runs.keys == ["order:1", "order:2"]


@pytest.mark.parametrize(
    "key",
    [
        lambda m: None,
        lambda m: "",
        lambda m: 42,
        lambda m: m.headers["missing"],
        lambda m: "x" * 5000,
        lambda m: "bad\x00key",
    ],
    ids=["none", "empty", "not-str", "raises", "too-long", "nul"],
)
def test_a_message_without_a_usable_key_is_dead_lettered_never_run(
    key: Callable[[Message], Any],
) -> None:
    runs = Runs()
    c, _ = consumer(runs, key=key)
    verdict = run(c.handle(msg("order:1")))
    assert isinstance(verdict, DeadLetter)
    assert runs.keys == []


def test_no_header_and_no_key_function_says_so() -> None:
    runs = Runs()
    c, _ = consumer(runs)
    verdict = run(c.handle(msg(None)))
    assert isinstance(verdict, DeadLetter)
    assert "no business key" in verdict.reason
    assert "idempotency-key" in verdict.reason
    assert runs.keys == []


def test_the_key_function_decides_over_the_header() -> None:
    seen: list[bytes] = []
    c, guard = consumer(lambda m: seen.append(m.body), key=lambda m: m.headers["order"])
    assert run(c.handle(msg("k1", b"a", order="order:7"))) == Ack(ran=True)
    assert run(c.handle(msg("k2", b"b", order="order:7"))) == Ack(ran=False)
    assert seen == [b"a"]
    assert guard.get("stock", "order:7") is not None


def test_header_names_are_matched_ignoring_case() -> None:
    runs = Runs()
    c, guard = consumer(runs)
    assert run(c.handle(Message(b"", {"Idempotency-Key": "order:9"}))) == Ack(ran=True)
    assert guard.get("stock", "order:9") is not None


def test_the_message_id_header_names_the_event_over_its_aggregate_key() -> None:
    # An outbox row's messages: two events of one order (one aggregate key), each with its
    # own id; the relay's re-publish of the first carries the first's id again.
    seen: list[bytes] = []
    c, guard = consumer(lambda m: seen.append(m.body))
    paid = Message(b"paid", {"message-id": "41", "idempotency-key": "order:1"}, id="b-1")
    shipped = Message(b"shipped", {"message-id": "42", "idempotency-key": "order:1"}, id="b-2")
    again = Message(b"paid", {"message-id": "41", "idempotency-key": "order:1"}, id="b-3")
    assert [run(c.handle(m)) for m in (paid, shipped, again)] == [
        Ack(ran=True),
        Ack(ran=True),
        Ack(ran=False),
    ]
    assert seen == [b"paid", b"shipped"]
    assert guard.get("stock", "41") is not None


def test_publish_names_a_message_by_its_business_key_unless_given_an_id() -> None:
    keyed = outgoing("orders", b"{}", key="order:5")
    assert keyed.headers["message-id"] == keyed.message_id == "order:5"
    assert outgoing("orders", b"{}", key="order:5", message_id="ev-9").message_id == "ev-9"
    first, second = outgoing("orders", b"{}", key=None), outgoing("orders", b"{}", key=None)
    assert first.message_id != second.message_id  # no key: every message is its own event
    # a producer publishing one business event twice: the consumer runs it once
    runs: list[bytes] = []
    c, _ = consumer(lambda m: runs.append(m.body))
    for n in (1, 2):
        sent = outgoing("orders", b"reserve", key="order:5")
        run(c.handle(Message(sent.body, sent.headers, id=f"broker-{n}")))
    assert runs == [b"reserve"]


def test_an_async_handler_runs_on_the_loop() -> None:
    ran: list[str] = []

    async def handler(message: Message) -> None:
        await asyncio.sleep(0)
        ran.append(message.headers["idempotency-key"])

    c, _ = consumer(handler)
    assert run(c.handle(msg("order:1"))) == Ack(ran=True)
    assert run(c.handle(msg("order:1"))) == Ack(ran=False)
    assert ran == ["order:1"]


def test_the_request_id_header_is_restored_for_the_handler_and_the_record() -> None:
    seen: list[str | None] = []
    c, guard = consumer(lambda m: seen.append(get_request_id()))
    run(c.handle(Message(b"", {"idempotency-key": "order:1", "x-request-id": "req-42"})))
    run(c.handle(msg("order:2")))
    assert seen == ["req-42", None]
    record = guard.get("stock", "order:1")
    assert record is not None
    assert record.request_id == "req-42"
    assert get_request_id() is None  # nothing leaks past the message


def test_failures_are_counted_backed_off_then_dead_lettered_with_the_callback() -> None:
    tries: list[int] = []
    dead: list[tuple[str | None, str]] = []

    def poison(message: Message) -> None:
        tries.append(1)
        raise ValueError("stock service says no")

    c, guard = consumer(
        poison, max_attempts=3, retry_delay=0.05, on_dead_letter=lambda m, r: dead.append((m.id, r))
    )
    delays = []
    for _ in range(3):
        verdict = run(c.handle(msg("order:1")))
        if isinstance(verdict, Retry):
            delays.append(verdict.delay)
            # A copy back before the backoff is over is sent back again, not run.
            early = run(c.handle(msg("order:1")))
            assert isinstance(early, Retry)
            assert "in flight" in early.reason
            time.sleep(verdict.delay + 0.02)
    assert delays == [0.05, 0.1]
    assert isinstance(verdict, DeadLetter)
    assert "3 time(s)" in verdict.reason
    assert "ValueError" in verdict.reason
    assert len(tries) == 3
    assert dead == [("m-order:1", verdict.reason)]
    record = guard.get("stock", "order:1")
    assert record is not None
    assert record.status is Status.FAILED
    assert record.attempts == 3
    # Every later copy is dead-lettered too, without running.
    again = run(c.handle(msg("order:1")))
    assert isinstance(again, DeadLetter)
    assert len(tries) == 3


def test_a_failing_dead_letter_callback_keeps_the_message() -> None:
    def broken(message: Message, reason: str) -> None:
        raise OSError("dead-letter table is down")

    c, _ = consumer(lambda m: None, on_dead_letter=broken)
    verdict = run(c.handle(msg(None)))
    assert isinstance(verdict, Retry)
    assert "on_dead_letter" in verdict.reason


def test_an_async_dead_letter_callback_is_awaited() -> None:
    dead: list[str] = []

    async def keep(message: Message, reason: str) -> None:
        dead.append(reason)

    c, _ = consumer(lambda m: None, on_dead_letter=keep)
    assert isinstance(run(c.handle(msg(None))), DeadLetter)
    assert len(dead) == 1


def test_a_key_in_flight_elsewhere_comes_back_later_and_runs_after_the_lease() -> None:
    runs = Runs()
    c, guard = consumer(runs, in_flight_delay=0.5)
    held = guard.store.claim(ClaimRequest("stock", "order:1", "another-worker", 0.3, 60))
    assert held.acquired
    verdict = run(c.handle(msg("order:1")))
    assert isinstance(verdict, Retry)
    assert 0.05 <= verdict.delay <= 0.3
    assert runs.keys == []
    time.sleep(0.35)  # the holder died: its lease runs out
    assert run(c.handle(msg("order:1"))) == Ack(ran=True)
    record = guard.get("stock", "order:1")
    assert record is not None
    assert record.attempts == 2


def test_a_long_handler_keeps_its_claim_by_renewing_the_lease() -> None:
    started = threading.Event()
    release = threading.Event()

    def slow(message: Message) -> None:
        started.set()
        release.wait(5)

    c, guard = consumer(slow, lease=0.3)
    other, _ = consumer(Runs(), lease=0.3)
    other.guard = guard  # a second worker on the same store

    async def scenario() -> tuple[Verdict, Verdict]:
        first = asyncio.ensure_future(c.handle(msg("order:1")))
        await asyncio.to_thread(started.wait, 5)
        await asyncio.sleep(0.9)  # three leases
        copy = await other.handle(msg("order:1"))
        release.set()
        return await first, copy

    first, copy = run(scenario())
    assert first == Ack(ran=True)
    assert isinstance(copy, Retry)
    assert "in flight" in copy.reason


class FlakyStore(MemoryStore):
    def __init__(self, fail: str) -> None:
        super().__init__()
        self.failing = fail

    def claim(self, req: ClaimRequest) -> Any:
        if self.failing == "claim":
            raise StoreUnavailableError("store down")
        return super().claim(req)

    def complete(self, ticket: Any, result: bytes, codec: str, ttl: float | None) -> Any:
        if self.failing == "complete":
            raise StoreUnavailableError("store down")
        return super().complete(ticket, result, codec, ttl)


@pytest.mark.parametrize("step", ["claim", "complete"])
def test_a_store_fault_sends_the_message_back(step: str) -> None:
    runs = Runs()
    c = IdempotentConsumer(Guard(FlakyStore(step)), "stock", runs, retry_delay=0.05)
    verdict = run(c.handle(msg("order:1")))
    assert isinstance(verdict, Retry)
    expected = "unavailable at claim" if step == "claim" else "the completion is kept"
    assert expected in verdict.reason
    assert runs.keys == ([] if step == "claim" else ["order:1"])
    # Still down: the copy goes back again, and nothing runs a second time.
    again = run(c.handle(msg("order:1")))
    assert isinstance(again, Retry)
    assert runs.keys == ([] if step == "claim" else ["order:1"])
    # Back: a claim refused runs now; a run whose completion was refused is completed from
    # what the consumer kept and acked without running again (before, the copy waited out
    # the lease and then ran a second time).
    c.guard.store.failing = ""  # type: ignore[attr-defined]
    assert run(c.handle(msg("order:1"))) == Ack(ran=step == "claim")
    assert runs.keys == ["order:1"]
    assert run(c.handle(msg("order:1"))) == Ack(ran=False)
    assert runs.keys == ["order:1"]
    assert len(c.unwritten) == 0


class BrokenDriverStore(MemoryStore):
    """A store whose driver fails with an error it does not map to StoreUnavailableError."""

    def claim(self, req: ClaimRequest) -> Any:
        raise RuntimeError("driver state corrupted")


def test_an_unmapped_store_error_sends_messages_back_instead_of_raising() -> None:
    runs = Runs()
    c = IdempotentConsumer(Guard(BrokenDriverStore()), "stock", runs, retry_delay=0.05)
    one = run(c.handle(msg("order:1")))
    batch = run(c.handle_batch([msg("order:2"), msg("order:3"), msg("order:2")]))
    for verdict in [one, *batch]:
        assert isinstance(verdict, Retry)
        assert "RuntimeError: driver state corrupted" in verdict.reason
    assert runs.keys == []


def test_cancellation_releases_the_claim_so_the_redelivery_runs_at_once() -> None:
    async def stuck(message: Message) -> None:
        await asyncio.sleep(10)

    c, guard = consumer(stuck)

    async def scenario() -> None:
        task = asyncio.ensure_future(c.handle(msg("order:1")))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario())
    assert guard.get("stock", "order:1") is None


def test_a_batch_decides_each_message_and_copies_inside_it() -> None:
    runs = Runs()
    c, _ = consumer(runs)
    run(c.handle(msg("order:0")))
    batch = [msg("order:0"), msg("order:1"), msg(None), msg("order:1"), msg("order:2")]
    verdicts = run(c.handle_batch(batch))
    assert verdicts[0] == Ack(ran=False)
    assert verdicts[1] == Ack(ran=True)
    assert isinstance(verdicts[2], DeadLetter)
    assert verdicts[3] == Ack(ran=False)
    assert verdicts[4] == Ack(ran=True)
    assert runs.keys == ["order:0", "order:1", "order:2"]


def test_a_failure_inside_a_batch_retries_only_that_key() -> None:
    def handler(message: Message) -> None:
        if message.headers["idempotency-key"] == "order:bad":
            raise RuntimeError("boom")

    c, guard = consumer(handler)
    verdicts: Sequence[Verdict] = run(
        c.handle_batch([msg("order:1"), msg("order:bad"), msg("order:bad"), msg("order:2")])
    )
    assert verdicts[0] == verdicts[3] == Ack(ran=True)
    assert isinstance(verdicts[1], Retry)
    assert isinstance(verdicts[2], Retry)
    ok = guard.get("stock", "order:2")
    assert ok is not None
    assert ok.status is Status.SUCCEEDED


def test_a_batch_gives_each_message_its_own_request_id_and_none_to_those_without() -> None:
    seen: list[tuple[str, str | None]] = []
    dead: list[str | None] = []
    c, guard = consumer(
        lambda m: seen.append((m.headers["idempotency-key"], get_request_id())),
        on_dead_letter=lambda m, reason: dead.append(get_request_id()),
    )

    def tagged(key: str | None, rid: str | None) -> Message:
        headers = {} if rid is None else {"x-request-id": rid}
        return msg(key, b"{}", **headers)

    async def scenario() -> list[Verdict]:
        # A request id current around the batch is not a message's: one without the header
        # runs without any, as it would alone.
        with request_id_scope("outer"):
            verdicts = await c.handle_batch(
                [
                    tagged("order:a", "req-a"),
                    tagged("order:b", None),
                    tagged(None, "req-dead"),
                    tagged("order:c", "req-c"),
                    tagged("order:d", "outer"),
                ]
            )
            assert get_request_id() == "outer"  # restored after the batch
            return verdicts

    verdicts = run(scenario())
    assert isinstance(verdicts[2], DeadLetter)
    assert seen == [
        ("order:a", "req-a"),
        ("order:b", None),
        ("order:c", "req-c"),
        ("order:d", "outer"),
    ]
    assert dead == ["req-dead"]  # the dead-letter hook runs in the message's request id
    for key, rid in (("order:a", "req-a"), ("order:b", None), ("order:c", "req-c")):
        record = guard.get("stock", key)
        assert record is not None
        assert record.request_id == rid
    assert get_request_id() is None


class NoneRefused:
    """A codec that can't store None, the result every consumer's completion holds."""

    name = "no-none"

    def encode(self, value: Any) -> bytes:
        if value is None:
            raise ValueError("None is not stored here")
        return b"1"

    def decode(self, data: bytes, type_hint: Any = None) -> Any:
        return 1


@pytest.mark.parametrize("batch", [False, True])
def test_a_codec_that_cannot_store_none_runs_no_handler(batch: bool) -> None:
    # The completion's bytes are made before the handler runs: made after it, their failure
    # left the claim to lapse, and the copy that came back ran the handler again.
    runs = Runs()
    guard = Guard(MemoryStore(), lease=5, codec=NoneRefused())
    c = IdempotentConsumer(guard, "stock", runs, retry_delay=0.05)
    messages = [msg("order:1"), msg("order:2")]
    for _ in range(3):
        verdicts = run(c.handle_batch(messages)) if batch else [run(c.handle(m)) for m in messages]
        assert all(isinstance(v, Retry) and "CodecError" in v.reason for v in verdicts), verdicts
    assert runs.keys == []
    # Given back, not left held for the lease: another consumer's claim is granted at once.
    for key in ("order:1", "order:2"):
        claim = guard.store.claim(ClaimRequest("stock", key, "probe", 5.0, 60.0))
        assert claim.acquired, claim


class Held(pydantic.BaseModel):
    """What a handler's error may carry: a model whose dump raises."""

    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    lock: object


@pytest.mark.parametrize("batch", [False, True])
def test_a_last_failure_that_cannot_be_spelt_is_dead_lettered_once(batch: bool) -> None:
    # The failure is written after the handler's last attempt: one that couldn't be spelt once
    # escaped with the claim held ("undecided"), and every copy after it ran the handler again.
    runs = Runs()

    def refuse(message: Message) -> None:
        runs(message)
        raise ValueError(Held(lock=threading.Lock()))

    c, guard = consumer(refuse, max_attempts=1)
    for _ in range(3):
        m = msg("order:1")
        verdict = run(c.handle_batch([m]))[0] if batch else run(c.handle(m))
        assert isinstance(verdict, DeadLetter), verdict
    assert runs.keys == ["order:1"]
    record = guard.get("stock", "order:1")
    assert record is not None
    assert record.status is Status.FAILED


class Unspeakable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no words")


@pytest.mark.parametrize("batch", [False, True])
def test_a_failure_whose_text_cannot_be_read_still_counts_its_attempts(batch: bool) -> None:
    # The verdict's reason quotes the error: a str() that raised left the claim held, the
    # attempt uncounted, and every redelivery ran the handler again, past max_attempts.
    runs: list[int] = []

    def handler(message: Message) -> None:
        runs.append(1)
        raise Unspeakable

    guard = Guard(MemoryStore(), lease=5)
    c = IdempotentConsumer(guard, "stock", handler, max_attempts=2, retry_delay=0.05)
    m = msg("order:1")
    verdicts = []
    for _ in range(4):
        got = run(c.handle_batch([m]))[0] if batch else run(c.handle(m))
        verdicts.append(got)
        if isinstance(got, Retry):  # the failed attempt holds the key for its backoff
            time.sleep(got.delay + 0.02)
    assert runs == [1, 1]
    assert isinstance(verdicts[0], Retry)
    assert "Unspeakable" in verdicts[0].reason
    assert all(isinstance(v, DeadLetter) for v in verdicts[1:]), verdicts
