"""How an async first call ends, against the sync one: the result completed, a result the
codec can't store recorded as the failure and raised, and a store that fails the completion
(raised, or with ``fail_open`` logged and the result returned)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from mideng import Guard
from mideng.core.record import Record, Status, Ticket
from mideng.errors import CodecError, StoreUnavailableError
from mideng.stores.memory import MemoryStore


class Down(MemoryStore):
    """Claims, but every completion fails as an unreachable store's would."""

    def complete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Record:
        raise StoreUnavailableError("down")

    async def acomplete(
        self, ticket: Ticket, result: bytes, codec: str, ttl: float | None
    ) -> Record:
        raise StoreUnavailableError("down")


def _both(guard: Guard, key: str, value: Any) -> tuple[Any, Any]:
    """What ``run`` and ``arun`` did with a body returning ``value``: its result or error."""
    outcomes = []
    for mode in ("sync", "async"):

        async def body() -> Any:
            return value

        try:
            if mode == "sync":
                outcomes.append(guard.run("s", f"{key}-{mode}", lambda: value))
            else:
                outcomes.append(asyncio.run(guard.arun("s", f"{key}-{mode}", body)))
        except Exception as exc:
            outcomes.append(exc)
    return outcomes[0], outcomes[1]


def test_a_result_is_completed_alike() -> None:
    guard = Guard(MemoryStore())
    assert _both(guard, "ok", {"a": 1}) == ({"a": 1}, {"a": 1})
    for mode in ("sync", "async"):
        record = guard.get("s", f"ok-{mode}")
        assert record is not None
        assert (record.status, record.result, record.codec) == (
            Status.SUCCEEDED,
            b'{"a":1}',
            "json",
        )


def test_a_result_the_codec_cant_store_is_recorded_and_raised_alike() -> None:
    guard = Guard(MemoryStore(), on_error="record")
    sync, asynchronous = _both(guard, "bad", object())
    assert isinstance(sync, CodecError)
    assert isinstance(asynchronous, CodecError)
    records = [guard.get("s", f"bad-{mode}") for mode in ("sync", "async")]
    assert all(r is not None and r.status is Status.FAILED for r in records)
    assert records[0] is not None
    assert records[1] is not None
    assert records[0].error == records[1].error


def test_a_completion_the_store_fails_is_raised_alike() -> None:
    sync, asynchronous = _both(Guard(Down()), "down", 1)
    assert isinstance(sync, StoreUnavailableError)
    assert isinstance(asynchronous, StoreUnavailableError)


def test_with_fail_open_a_failed_completion_is_logged_and_the_result_returned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="mideng"):
        assert _both(Guard(Down(), fail_open=True), "open", 7) == (7, 7)
    warnings = [r.getMessage() for r in caplog.records if r.name == "mideng"]
    assert len(warnings) == 2
    assert warnings[0].replace("open-sync", "open-async") == warnings[1]


def test_a_result_pickle_cant_store_is_recorded_and_raised_not_left_processing() -> None:
    """pickle raises its own errors (PicklingError, AttributeError for a local object); the
    codec answers CodecError, as the JSON codec does, so the failure is recorded. Left as the
    pickle error, the record stayed processing and, once its lease ran out, a take-over ran the
    body a second time."""
    guard = Guard(MemoryStore(), codec="pickle")

    def local() -> None:  # a local function: pickle can't name it
        pass

    for value in (local, lambda: None):
        sync, asynchronous = _both(guard, f"unpicklable-{id(value)}", value)
        assert isinstance(sync, CodecError)
        assert isinstance(asynchronous, CodecError)
        for mode in ("sync", "async"):
            record = guard.get("s", f"unpicklable-{id(value)}-{mode}")
            assert record is not None
            assert record.status is Status.FAILED
    runs: list[int] = []
    with pytest.raises(CodecError):
        guard.run("s", f"unpicklable-{id(local)}-sync", lambda: runs.append(1))
    assert runs == []  # the recorded failure answers; the body does not run again
